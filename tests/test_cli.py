"""The pymtp command line (pymtp.cli.main), run in-process."""

from __future__ import annotations

import io
import json
import sys
import types

import pytest
from conftest import CtrlCAfterFirstWrite

import pymtp
from pymtp.cli import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Progress, main


@pytest.fixture
def fixture_model(gguf):
    return str(gguf("glm4moe"))


def test_help(capsys):
    assert main(["--help"]) == EXIT_OK
    out = capsys.readouterr().out
    for word in ("generate", "chat", "bench", "info", "serve", "examples:", "PYMTP_MODEL"):
        assert word in out
    assert main(["generate", "--help"]) == EXIT_OK
    out = capsys.readouterr().out
    for opt in (
        "--model",
        "--max-tokens",
        "--temperature",
        "--top-k",
        "--top-p",
        "--min-p",
        "--seed",
        "--stop",
        "--no-spec",
        "--n-draft",
        "examples:",
    ):
        assert opt in out
    assert main([]) == EXIT_USAGE
    assert main(["--version"]) == EXIT_OK
    assert pymtp.__version__ in capsys.readouterr().out


def test_generate(capsys, fixture_model, models):
    rc = main(["generate", "-m", fixture_model, "-n", "12", "def f(x):"])
    cap = capsys.readouterr()
    assert rc == EXIT_OK
    ref = pymtp.generate("def f(x):", models("glm4moe"), max_tokens=12)
    assert cap.out == ref.text + "\n"
    assert "12 tokens" in cap.err and "tok/s" in cap.err and "acceptance" in cap.err
    assert "mean accepted" in cap.err and "finish: length" in cap.err


def test_generate_options(capsys, fixture_model, models):
    rc = main(
        [
            "generate",
            "-m",
            fixture_model,
            "-n",
            "8",
            "--no-spec",
            "--json",
            "--seed",
            "3",
            "-t",
            "0.8",
            "--top-k",
            "20",
            "--top-p",
            "0.9",
            "--min-p",
            "0.05",
            "hello",
        ]
    )
    assert rc == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    ref = pymtp.generate(
        "hello",
        models("glm4moe"),
        max_tokens=8,
        seed=3,
        temperature=0.8,
        top_k=20,
        top_p=0.9,
        min_p=0.05,
        speculative=False,
    )
    assert doc["text"] == ref.text and doc["usage"]["completion_tokens"] == 8
    assert doc["stats"]["n_drafted"] == 0
    rc = main(["generate", "-m", fixture_model, "-n", "8", "--n-draft", "2", "--no-adaptive", "-q", "hello"])
    cap = capsys.readouterr()
    assert rc == EXIT_OK and cap.err == ""
    assert cap.out == pymtp.generate("hello", models("glm4moe"), max_tokens=8).text + "\n"


def test_generate_from_stdin(capsys, fixture_model, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello"))
    assert main(["generate", "-m", fixture_model, "-n", "4", "-q", "-"]) == EXIT_OK
    assert capsys.readouterr().out


def test_generate_stop(capsys, fixture_model, models):
    full = pymtp.generate("hello", models("glm4moe"), max_tokens=12).text
    cut = [c for c in full[2:] if c != "\ufffd"][0]
    assert main(["generate", "-m", fixture_model, "-n", "12", "--stop", cut, "hello"]) == EXIT_OK
    cap = capsys.readouterr()
    assert cap.out == full[: full.index(cut)] + "\n" and "finish: stop" in cap.err


def test_missing_model_file(capsys, tmp_path):
    missing = str(tmp_path / "nope.gguf")
    for cmd in (["generate", "-m", missing, "hi"], ["info", "-m", missing], ["chat", "-m", missing]):
        assert main(cmd) == EXIT_USAGE
        err = capsys.readouterr().err
        assert "model file not found" in err and "nope.gguf" in err


def test_missing_default_model(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PYMTP_MODEL", str(tmp_path / "absent.gguf"))
    assert main(["info"]) == EXIT_USAGE
    assert "--model" in capsys.readouterr().err


def test_not_a_gguf(capsys, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf at all")
    assert main(["info", "-m", str(bad)]) == EXIT_ERROR
    assert "error" in capsys.readouterr().err


def test_bad_option_values(capsys, fixture_model):
    assert main(["generate", "-m", fixture_model, "-t", "-1", "hi"]) == EXIT_USAGE
    assert "--temperature" in capsys.readouterr().err
    assert main(["generate", "-m", fixture_model, "--n-draft", "0", "hi"]) == EXIT_USAGE
    assert "--n-draft" in capsys.readouterr().err
    assert main(["generate", "-m", fixture_model, "--max-tokens", "lots", "hi"]) == EXIT_USAGE


def test_info(capsys, fixture_model):
    assert main(["info", "-m", fixture_model]) == EXIT_OK
    out = capsys.readouterr().out
    for needle in (
        "glm4moe",
        "MTP blocks",
        "1 (loaded)",
        "304 tokens",
        "2048",
        "parameters",
        "file size",
        "llama.cpp",
        "backends",
    ):
        assert needle in out
    assert main(["info", "-m", fixture_model, "--json"]) == EXIT_OK
    info = json.loads(capsys.readouterr().out)
    assert info["architecture"] == "glm4moe" and info["n_mtp_layers"] == 1 and info["n_vocab"] == 304
    assert info["n_ctx_train"] == 2048 and info["n_params"] > 0 and info["file_size"] > 0
    assert info["build_info"] == pymtp.build_info()


def test_info_without_mtp(capsys, gguf):
    assert main(["info", "-m", str(gguf("glm4moe-nomtp"))]) == EXIT_OK
    assert "no speculative decoding" in capsys.readouterr().out


def test_chat_needs_a_template(capsys, fixture_model):
    assert main(["chat", "-m", fixture_model]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no chat template" in err and "--template" in err


def test_chat_repl(capsys, fixture_model, monkeypatch, models):
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello\n/stats\n\nHow are you?\n/exit\nnever read\n"))
    assert main(["chat", "-m", fixture_model, "--template", "chatml", "-n", "6", "--stats"]) == EXIT_OK
    cap = capsys.readouterr()
    from pymtp.chat import chat

    m = models("glm4moe")
    first = chat("Hello", m, template="chatml", max_tokens=6)
    second = chat(
        [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": first.text},
            {"role": "user", "content": "How are you?"},
        ],
        m,
        template="chatml",
        max_tokens=6,
    )
    assert cap.out == first.text + "\n" + second.text + "\n"
    assert cap.err.count("tok/s") == 3  # --stats after each reply, and /stats once


def test_generate_interrupted(capsys, fixture_model, monkeypatch):
    out = CtrlCAfterFirstWrite()
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["generate", "-m", fixture_model, "-n", "40", "--ignore-eos", "def f(x):"]) == EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert out.writes[0] and out.getvalue() == out.writes[0] + "\n"
    assert "interrupted" in err and "tok/s" not in err


def test_chat_reply_interrupted_is_kept(capsys, fixture_model, monkeypatch, models):
    out = CtrlCAfterFirstWrite()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello\nHow are you?\n"))
    assert main(["chat", "-m", fixture_model, "--template", "chatml", "-n", "8", "--ignore-eos", "--stats"]) == EXIT_OK
    err = capsys.readouterr().err
    from pymtp.chat import chat

    partial = out.writes[0]  # the interrupted reply so far: kept in the conversation
    second = chat(
        [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": partial},
            {"role": "user", "content": "How are you?"},
        ],
        models("glm4moe"),
        template="chatml",
        max_tokens=8,
        ignore_eos=True,
    )
    assert partial and out.getvalue() == partial + "\n" + second.text + "\n"
    assert "(reply interrupted)" in err and err.count("tok/s") == 1


def test_bench_is_forwarded(monkeypatch):
    seen = {}

    def fake_main(argv):
        seen["argv"] = argv
        return 7

    fake = types.ModuleType("pymtp.bench")
    fake.main = fake_main
    monkeypatch.setitem(sys.modules, "pymtp.bench", fake)
    monkeypatch.setattr(pymtp, "bench", fake, raising=False)
    assert main(["bench", "--smoke", "-m", "x.gguf"]) == 7
    assert seen["argv"] == ["--smoke", "-m", "x.gguf"]


def test_progress_plain_fallback():
    buf = io.StringIO()
    with Progress("loading thing", delay=0.05, file=buf):
        import time

        time.sleep(0.3)
    text = buf.getvalue()
    assert "loading thing ..." in text and "done in" in text
    buf = io.StringIO()
    with Progress("quick", delay=5, file=buf):
        pass
    assert buf.getvalue() == ""


def test_serve_needs_the_extra_or_starts(monkeypatch, capsys, fixture_model):
    import pymtp.server as server

    calls = {}
    monkeypatch.setattr(server, "serve", lambda app, **kw: calls.update(kw, app=app))
    assert main(["serve", "-m", fixture_model, "--port", "8123", "--model-name", "m1", "-q"]) == EXIT_OK
    assert calls["port"] == 8123 and calls["host"] == "127.0.0.1"
    paths = {r.path for r in calls["app"].routes}
    assert {"/v1/models", "/v1/completions", "/v1/chat/completions"} <= paths


def test_generate_chat_flag(capsys, fixture_model, models):
    assert main(["generate", "-m", fixture_model, "--chat", "--template", "chatml", "-n", "6", "-q", "Hi"]) == 0
    from pymtp.chat import chat

    assert capsys.readouterr().out == chat("Hi", models("glm4moe"), template="chatml", max_tokens=6).text + "\n"
    assert main(["generate", "-m", fixture_model, "--chat", "Hi"]) == EXIT_USAGE  # no template in the GGUF
    assert "--template" in capsys.readouterr().err
