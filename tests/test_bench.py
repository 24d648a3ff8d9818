"""pymtp bench: the smoke run's JSON, the llama.cpp log parser, prompt selection, summary."""

from __future__ import annotations

import json
import math

import pytest

import pymtp
from pymtp import bench
from pymtp.train.data import is_heldout, split_files, stdlib_root

# Tails of real logs (stderr, -lv 4) of llama-speculative-simple --spec-type draft-mtp --spec-draft-n-max 3
# and llama-completion, built from the pinned tree 0c1e57098bba, on the glm4moe fixture.
SPEC_LOG = (
    "0.00.043.266 I encoded   43 tokens in    0.003 seconds, speed: 13534.781 t/s\n"
    "0.00.043.278 I decoded   51 tokens in    0.012 seconds, speed: 4334.892 t/s\n"
    "0.00.043.284 I \n"
    "0.00.043.289 I n_draft   = 3\n"
    "0.00.043.295 I n_predict = 51\n"
    "0.00.043.300 I n_drafted = 66\n"
    "0.00.043.306 I n_accept  = 29\n"
    "0.00.043.311 I accept    = 43.939%\n"
    "0.00.043.316 I \n"
    "0.00.043.322 I draft:\n"
    "\n"
    "0.00.043.375 I spec common_specu: statistics        draft-mtp: #calls(b,g,a) =    1     22     22, #gen drafts =     22, #acc drafts =    11, #gen tokens =     66, #acc tokens =    29, #mean acc len = 2.32, #acc rate/pos = (0.500, 0.455, 0.364), dur(b,g,a) = 0.001, 4.544, 0.001 ms\n"
    "0.00.043.381 I \n"
    "0.00.043.386 I target:\n"
    "\n"
    "0.00.043.393 I common_perf_print:    sampling time =       0.16 ms\n"
    "0.00.043.399 I common_perf_print:    samplers time =       0.13 ms /    51 tokens\n"
    "0.00.043.405 I common_perf_print:        load time =       6.93 ms\n"
    "0.00.043.412 I common_perf_print: prompt eval time =       3.08 ms /   132 tokens (    0.02 ms per token, 42884.99 tokens per second)\n"
    "0.00.043.419 I common_perf_print:        eval time =       0.00 ms /     1 runs   (    0.00 ms per token,      inf tokens per second)\n"
    "0.00.043.425 I common_perf_print:       total time =      17.55 ms /   133 tokens\n"
    "0.00.043.431 I common_perf_print: unaccounted time =      14.31 ms /  81.6 %      (total - sampling - prompt eval - eval) / (total)\n"
    "0.00.043.436 I common_perf_print:    graphs reused =         22\n"
)

COMPLETION_LOG = (
    "0.00.038.537 I common_perf_print:    sampling time =       0.20 ms\n"
    "0.00.038.548 I common_perf_print:    samplers time =       0.13 ms /    91 tokens\n"
    "0.00.038.555 I common_perf_print:        load time =       8.64 ms\n"
    "0.00.038.562 I common_perf_print: prompt eval time =       0.98 ms /    43 tokens (    0.02 ms per token, 43654.82 tokens per second)\n"
    "0.00.038.568 I common_perf_print:        eval time =       3.21 ms /    47 runs   (    0.07 ms per token, 14623.52 tokens per second)\n"
    "0.00.038.574 I common_perf_print:       total time =      14.64 ms /    90 tokens\n"
    "0.00.038.580 I common_perf_print: unaccounted time =      10.24 ms /  70.0 %      (total - sampling - prompt eval - eval) / (total)\n"
    "0.00.038.585 I common_perf_print:    graphs reused =         46\n"
)


def test_parse_speculative_log():
    p = bench.parse_llama_output(SPEC_LOG)
    assert p["encoded"] == {"n": 43, "s": 0.003, "tps": 13534.781}
    assert p["decoded"] == {"n": 51, "s": 0.012, "tps": 4334.892}
    assert (p["n_draft"], p["n_predict"], p["n_drafted"], p["n_accept"]) == (3, 51, 66, 29)
    assert p["accept_pct"] == pytest.approx(43.939)
    s = p["spec"]
    assert s["type"] == "draft-mtp"
    assert (s["calls_begin"], s["calls_draft"], s["calls_accept"]) == (1, 22, 22)
    assert (s["gen_drafts"], s["acc_drafts"], s["gen_tokens"], s["acc_tokens"]) == (22, 11, 66, 29)
    assert s["mean_acc_len"] == pytest.approx(2.32)
    assert s["acc_rate_pos"] == pytest.approx([0.5, 0.455, 0.364])
    assert s["dur_ms"] == {"begin": 0.001, "draft": 4.544, "accept": 0.001}
    assert p["sampling_ms"] == pytest.approx(0.16)
    assert p["prompt_eval"] == {"ms": 3.08, "n": 132}
    assert p["eval"]["n"] == 1
    assert p["load_ms"] == pytest.approx(6.93)


def test_parse_completion_log_and_perf_durations():
    p = bench.parse_llama_output(COMPLETION_LOG)
    assert "decoded" not in p and "spec" not in p
    assert p["eval"] == {"ms": 3.21, "n": 47, "tps": pytest.approx(47 / 3.21e-3)}
    assert p["prompt_eval"] == {"ms": 0.98, "n": 43}
    assert p["sampling_ms"] == pytest.approx(0.2)
    line = (
        "statistics        draft-mtp: #calls(b,g,a) =    1      5      5, #gen drafts =      5, #acc drafts =     2, "
        "#gen tokens =     10, #acc tokens =     3, dur(b,g,a) = 0.100, 2.500, 0.300 ms"
    )
    s = bench.parse_llama_output(line)["spec"]
    assert s["dur_ms"] == {"begin": 0.1, "draft": 2.5, "accept": 0.3}
    assert "acc_rate_pos" not in s  # no accept calls: no per-position rates
    assert bench.parse_llama_output("nothing here") == {}


def _prompt_file(rel: str) -> str:
    return rel.rsplit(":", 1)[0]


def test_prompts_are_heldout_and_deterministic():
    train, held = split_files(stdlib_root())  # the one split definition, asked independently
    code, prose = bench.code_prompts(3), bench.prose_prompts(3)
    assert [p.id for p in code] == ["code0", "code1", "code2"]
    assert code == bench.code_prompts(3) and prose == bench.prose_prompts(3)
    for p in code + prose:
        assert p.text.strip()
    drawn = [_prompt_file(p.source) for p in code + prose if p.source != "builtin"]
    assert drawn, "the stdlib is here: the prompts come from it, not from the built-in fallbacks"
    for rel in drawn:
        assert rel in held and rel not in train, f"{rel} is not a held-out file"
    for p in code:
        assert p.text.endswith("\n") and len(p.text) <= 700
    for p in prose:
        assert len(p.text) <= 320


def test_prompts_come_from_every_heldout_file_and_no_training_file(tmp_path):
    """A stdlib of files that all qualify as prompts: the bench draws exactly the held-out ones."""
    doc = " ".join(["This helper reads the value and returns it to the caller unchanged."] * 4)
    body = "".join(f"    v{k} = x + {k}\n" for k in range(6))
    names = [f"pkg/mod{i}.py" for i in range(80)]
    for rel in names:
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(f'def f(x):\n    """{doc}"""\n{body}    return x\n')
    held = [rel for rel in names if is_heldout(rel)]
    assert 2 <= len(held) < len(names)
    for prompts in (bench.code_prompts(len(names), root=tmp_path), bench.prose_prompts(len(names), root=tmp_path)):
        assert sorted(_prompt_file(p.source) for p in prompts) == held


def test_llama_commands_use_the_same_settings():
    spec = bench.Variant("llama-mtp-2", "llama.cpp", 2)
    plain = bench.Variant("llama-plain", "llama.cpp", None)
    bins = {"llama-speculative-simple": "/x/spec", "llama-completion": "/x/comp"}
    a = bench.llama_command(bins, spec, "m.gguf", "hi", 0.8, 7, 64, 2)
    b = bench.llama_command(bins, plain, "m.gguf", "hi", 0.8, 7, 64, 2)
    assert a[0] == "/x/spec" and b[0] == "/x/comp"
    for cmd in (a, b):
        for flag, val in (("-n", "64"), ("-t", "2"), ("--temp", "0.8"), ("--seed", "7"), ("-c", str(bench.N_CTX))):
            assert cmd[cmd.index(flag) + 1] == val
    assert a[a.index("--spec-type") + 1] == "draft-mtp" and a[a.index("--spec-draft-n-max") + 1] == "2"


def test_smoke_run_writes_json_with_positive_numbers(tmp_path, capsys):
    assert bench.main(["--smoke", "--out", str(tmp_path), "--no-plot"]) == 0
    table = capsys.readouterr().out
    assert "mtp-adaptive" in table and "mtp-auto" in table and "plain" in table
    assert "x plain" in table and "auto against plain and the best fixed" in table
    d = json.loads((tmp_path / "bench.json").read_text())
    assert d["schema"] == bench.SCHEMA
    assert d["settings"]["smoke"] and not d["settings"]["llama_cpp"] and d["llama_cpp"] is None
    assert len(d["models"]) == 1 and len(d["prompts"]) == 1
    variants = {v["name"] for v in d["settings"]["variants"]}
    assert variants == {"plain", "mtp-1", "mtp-2", "mtp-3", "mtp-4", "mtp-adaptive", "mtp-auto"}
    auto = [r for r in d["summary"] if r["variant"] == "mtp-auto" and r["prompts"] == "all"]
    assert auto and all(r["vs_best_fixed"] > 0 and r["best_fixed"].startswith("mtp-") for r in auto)
    runs = [r for r in d["runs"] if not r["warmup"]]
    assert runs and all(r["ok"] for r in d["runs"])
    assert len(runs) == len(variants) * len(d["settings"]["temps"])
    for r in runs:
        assert r["n_tokens"] == bench.SMOKE_TOKENS
        assert r["tps"] > 0 and r["t_decode"] > 0 and r["t_total"] > 0 and r["n_steps"] > 0
        if r["n_draft"] is not None:
            # auto may measure that drafting loses on this model and choose k = 0 throughout
            assert sum(r["drafted_at"]) == r["n_drafted"]
            assert r["n_drafted"] > 0 or r["variant"] == "mtp-auto"
    rows = d["summary"]
    assert {r["variant"] for r in rows} == variants
    for r in rows:
        assert r["tps_median"] > 0 and r["vs_plain"] > 0 and r["vs_llama"] is None
        assert math.isclose(sum(r["time_split"].values()), 1.0, rel_tol=1e-6)
        if r["n_draft"] is not None:
            assert 1.0 <= r["tokens_per_step"] <= 1 + r["n_draft"]
            assert all(0.0 <= x <= 1.0 for x in r["acceptance_by_position"])
    (prof,) = d["python_overhead"]
    assert prof["step_wall_s"] > 0 and prof["native_s"] > 0 and 0 <= prof["python_fraction"] < 1
    assert prof["native_by_call"]["pymtp_decode_rows"]["calls"] > 0


def test_bad_arguments_exit_nonzero(tmp_path, capsys):
    assert bench.main(["--smoke", "--out", str(tmp_path), "--model", str(tmp_path / "missing.gguf")]) == 2
    assert "not found" in capsys.readouterr().err


def test_llama_commands_carry_the_sampling_setting():
    bins = {"llama-speculative-simple": "/x/spec", "llama-completion": "/x/comp"}
    qwen = bench.PRESETS["qwen"]
    for v in (bench.Variant("llama-mtp-2", "llama.cpp", 2), bench.Variant("llama-plain", "llama.cpp", None)):
        cmd = bench.llama_command(bins, v, "m.gguf", "hi", qwen, 7, 64, 2)
        got = {
            f: cmd[cmd.index(f) + 1]
            for f in ("--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n")
        }
        assert got == {
            "--temp": "0.7",
            "--top-k": "20",
            "--top-p": "0.8",
            "--min-p": "0",
            "--repeat-penalty": "1.05",
            "--repeat-last-n": "64",
        }
    plain_t = bench.llama_command(bins, v, "m.gguf", "hi", 0.8, 7, 64, 2)  # a --temps value: nothing else on
    assert plain_t[plain_t.index("--top-k") + 1] == "0" and plain_t[plain_t.index("--repeat-penalty") + 1] == "1"
    assert qwen.config(seed=3) == pymtp.SamplingConfig(
        temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.05, seed=3
    )


def test_smoke_run_with_named_sampling_reports_step_costs(tmp_path, capsys):
    assert (
        bench.main(["--smoke", "--sampling", "greedy,qwen", "--drafts", "1,2", "--out", str(tmp_path), "--no-plot"])
        == 0
    )
    table = capsys.readouterr().out
    assert "qwen" in table and "samp+py %" in table
    d = json.loads((tmp_path / "bench.json").read_text())
    assert [s["name"] for s in d["settings"]["sampling"]] == ["greedy", "qwen"]
    assert d["settings"]["temps"] == [0.0, 0.7]
    runs = [r for r in d["runs"] if not r["warmup"]]
    assert {(r["sampling"], r["temperature"]) for r in runs} == {("greedy", 0.0), ("qwen", 0.7)}
    costs = {(c["sampling"], c["variant"]): c for c in d["step_costs"]}
    assert set(costs) == {
        (s, v) for s in ("greedy", "qwen") for v in ("plain", "mtp-1", "mtp-2", "mtp-adaptive", "mtp-auto")
    }
    for (samp, variant), c in costs.items():
        assert c["n_steps"] > 0 and c["step_ms"] > 0
        assert 0 < c["sampling_ms_per_step"] and 0 < c["python_ms_per_step"]
        assert c["sampling_ms_per_step"] + c["python_ms_per_step"] < c["step_ms"]
        calls = {k: v["calls"] for k, v in c["native_by_call"].items()}
        assert calls["pymtp_sampler_verify"] == c["n_steps"]  # one verify batch per step, plain too
        # sampled drafts: one native row per draft token; greedy ones come argmaxed from pymtp_draft_greedy
        drafted = calls.get("pymtp_draft_greedy", 0) > 0 or calls.get("pymtp_sampler_row", 0) > 0
        assert drafted or variant in ("plain", "mtp-auto")  # auto may choose k = 0 on the tiny model
        if drafted:
            assert (calls.get("pymtp_sampler_row", 0) > 0) == (samp == "qwen")
    rows = [r for r in d["summary"] if r["prompts"] == "all"]
    assert len(rows) == len(costs)
    for r in rows:
        c = costs[(r["sampling"], r["variant"])]
        assert r["step_costs"]["sampling_python_fraction"] == pytest.approx(
            (c["sampling_ms_per_step"] + c["python_ms_per_step"]) / c["step_ms"], rel=1e-6
        )


def test_unknown_sampling_name_exits_nonzero(tmp_path, capsys):
    assert bench.main(["--smoke", "--sampling", "greedy,hot", "--out", str(tmp_path)]) == 2
    assert "--sampling hot" in capsys.readouterr().err
