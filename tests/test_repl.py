"""The chat REPL (pymtp.repl, behind `pymtp chat`): commands, Ctrl-C, a conversation that outgrows
the context. Driven with scripted input(), plus one run in a real terminal (tmux)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest
from conftest import CtrlCAfterFirstWrite

import pymtp
from pymtp.chat import chat, chat_prompt, chat_prompt_tokens
from pymtp.cli import EXIT_OK, main
from pymtp.repl import HELP, ChatRepl

SYSTEM = "Be brief."


@pytest.fixture
def fixture_model(gguf):
    return str(gguf("glm4moe"))


def script(monkeypatch, items):
    """Make input() return the items in turn: a string is a line typed, KeyboardInterrupt is
    Ctrl-C at the prompt; after the last item, EOFError (Ctrl-D). Returns the lines read."""
    it = iter(items)
    read: list[str] = []

    def fake_input(prompt=""):
        item = next(it, EOFError)
        if isinstance(item, type) and issubclass(item, BaseException):
            raise item
        read.append(item)
        return item

    monkeypatch.setattr("builtins.input", fake_input)
    return read


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def test_commands(capsys, monkeypatch, fixture_model, models):
    read = script(
        monkeypatch,
        [
            "/stats",
            "/help",
            "Hello",
            "/stats",
            "/frobnicate now",
            "//etc",
            "/reset",
            "Hello",
            "/stats",
            "/exit",
            "never read",
        ],
    )
    rc = main(["chat", "-m", fixture_model, "--template", "chatml", "-n", "6", "--system", SYSTEM])
    cap = capsys.readouterr()
    assert rc == EXIT_OK and "never read" not in read
    m = models("glm4moe")
    sys_ = {"role": "system", "content": SYSTEM}
    first = chat([sys_, user("Hello")], m, template="chatml", max_tokens=6).text
    second = chat([sys_, user("Hello"), assistant(first), user("/etc")], m, template="chatml", max_tokens=6).text
    # the unknown command never reached the model; "//etc" went as "/etc"; /reset kept the system prompt
    assert cap.out == first + "\n" + second + "\n" + first + "\n"
    assert "(no reply yet)" in cap.err and HELP in cap.err
    assert "unknown command /frobnicate (not sent to the model)" in cap.err and "/help" in cap.err
    assert "(conversation cleared, system prompt kept)" in cap.err
    stats = [ln for ln in cap.err.splitlines() if "tok/s" in ln]
    assert len(stats) == 2 and all("finish: length" in ln for ln in stats)
    reused = [int(re.search(r"reused (\d+) of (\d+) prompt tokens", ln).group(1)) for ln in stats]
    assert reused[0] == 0 and reused[1] > 0  # after /reset the cached system prompt is reused


def test_ctrl_c_at_the_prompt(capsys, monkeypatch, fixture_model, models):
    # one Ctrl-C clears the line and goes on; two in a row exit
    read = script(
        monkeypatch, ["Hello", KeyboardInterrupt, "How are you?", KeyboardInterrupt, KeyboardInterrupt, "never read"]
    )
    assert main(["chat", "-m", fixture_model, "--template", "chatml", "-n", "6"]) == EXIT_OK
    cap = capsys.readouterr()
    assert read == ["Hello", "How are you?"]
    assert cap.err.count("Ctrl-C again or Ctrl-D to exit") == 2
    m = models("glm4moe")
    first = chat("Hello", m, template="chatml", max_tokens=6).text
    second = chat([user("Hello"), assistant(first), user("How are you?")], m, template="chatml", max_tokens=6).text
    assert cap.out == first + "\n" + second + "\n"
    # Ctrl-C, then Ctrl-D: exits too
    read = script(monkeypatch, [KeyboardInterrupt])
    assert main(["chat", "-m", fixture_model, "--template", "chatml"]) == EXIT_OK
    assert read == [] and capsys.readouterr().out == ""


def test_ctrl_c_during_a_reply(capsys, monkeypatch, fixture_model):
    out = CtrlCAfterFirstWrite()
    monkeypatch.setattr(sys, "stdout", out)
    # the reply's Ctrl-C does not count towards the two that exit at the prompt
    read = script(monkeypatch, ["Hello", "/stats", KeyboardInterrupt, "/stats", "/exit"])
    assert main(["chat", "-m", fixture_model, "--template", "chatml", "-n", "40", "--ignore-eos"]) == EXIT_OK
    err = capsys.readouterr().err
    assert read == ["Hello", "/stats", "/stats", "/exit"]
    assert "(reply interrupted)" in err and err.count("Ctrl-C again") == 1
    assert err.count("(no stats: the last reply was interrupted)") == 2
    assert out.getvalue() == out.writes[0] + "\n"


def _message(repl: ChatRepl, n_tokens: int, tag: str) -> str:
    """A user message whose conversation alone takes about n_tokens prompt tokens."""
    words = [tag]
    while repl.count([user(" ".join(words))]) < n_tokens:
        words.append(f"w{len(words)}")
    return " ".join(words)


def test_conversation_outgrows_the_context(capsys, monkeypatch, gguf):
    with pymtp.load(gguf("glm4moe"), n_ctx=256) as session:
        repl = ChatRepl(
            session, dict(max_tokens=24, ignore_eos=True, speculative=True), template="chatml", system=SYSTEM
        )
        assert session.target.n_ctx == 256
        msgs = [_message(repl, 60, f"turn{i}") for i in range(8)]
        read = script(monkeypatch, msgs)
        assert repl.run() == EXIT_OK
        cap = capsys.readouterr()
        assert read == msgs and "not sent" not in cap.err
        notes = [ln for ln in cap.err.splitlines() if "outgrew the context" in ln]
        assert notes and all("dropped the oldest" in ln and "kept the system prompt" in ln for ln in notes)
        h = repl.history
        assert h[0] == {"role": "system", "content": SYSTEM} and h[1]["role"] == "user"
        assert h[-2] == user(msgs[-1]) and len(h) < 1 + 2 * len(msgs)
        assert [x["role"] for x in h[1:]] == ["user", "assistant"] * ((len(h) - 1) // 2)
        # the last reply was generated from the trimmed conversation, and fits the context
        last = repl.last
        model = session.model
        assert last.prompt_tokens == chat_prompt_tokens(model, chat_prompt(model, h[:-1], template="chatml"))
        assert last.text == h[-1]["content"] and len(last.tokens) == 24 and last.finish_reason == "length"


def test_reply_reaches_the_context_end(capsys, monkeypatch, gguf):
    with pymtp.load(gguf("glm4moe"), n_ctx=256) as session:
        repl = ChatRepl(
            session, dict(max_tokens=100, ignore_eos=True, speculative=True), template="chatml", show_stats=True
        )
        long_msg = _message(repl, 220, "long")  # leaves less room than max_tokens: sent anyway
        too_long = _message(repl, 300, "huge")  # cannot fit at all: not sent
        read = script(monkeypatch, [long_msg, "/stats", "short", too_long, "/exit"])
        assert repl.run() == EXIT_OK
        err = capsys.readouterr().err
        assert len(read) == 5
        assert "(the reply stopped at the end of the context)" in err and "finish: context" in err
        assert "dropped the oldest 1 turn)" in err  # for "short"
        assert "(not sent: this message makes a prompt of" in err and "the context holds 256" in err
        assert [x["content"] for x in repl.history if x["role"] == "user"] == ["short"]
        assert repl.last.finish_reason == "length"


# ---- a real terminal -------------------------------------------------------------------------


@pytest.mark.skipif(
    shutil.which("tmux") is None,
    reason="tmux is not installed: the real-terminal REPL test drives `pymtp chat` with tmux send-keys / capture-pane",
)
def test_repl_in_tmux(tmp_path):
    sock = str(tmp_path / "tmux.sock")

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-S", sock, *args], check=True, capture_output=True, text=True).stdout

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", "repl")

    def wait_for(pred, what: str, timeout: float = 15.0) -> str:
        t_end = time.monotonic() + timeout
        while True:
            text = screen()
            if pred(text):
                return text
            if time.monotonic() > t_end:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{text}")
            time.sleep(0.1)

    def prompt_line(text: str) -> str:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    cmd = (
        f"{shlex.quote(sys.executable)} -m pymtp chat -m tiny --template llama3 -n 400 --ignore-eos -c 512; "
        'echo "[exit $?]"; sleep 60'
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run(
        ["tmux", "-S", sock, "-f", os.devnull, "new-session", "-d", "-s", "repl", "-x", "120", "-y", "40", cmd],
        check=True,
        env=env,
    )
    try:
        wait_for(lambda s: "/help for commands" in s and prompt_line(s) == ">", "the banner and prompt")
        tmux("send-keys", "-t", "repl", "/help", "Enter")
        wait_for(lambda s: "Start a line with //" in s and prompt_line(s) == ">", "the help")
        tmux("send-keys", "-t", "repl", "def add(a, b):", "Enter")
        # Ctrl-C during the reply stops it (400 tokens would take far longer than this)
        wait_for(lambda s: len(s.partition("> def add(a, b):")[2].strip()) > 20, "the reply to start")
        tmux("send-keys", "-t", "repl", "C-c")
        wait_for(lambda s: "(reply interrupted)" in s and prompt_line(s) == ">", "the interrupted reply")
        tmux("send-keys", "-t", "repl", "/stats", "Enter")
        wait_for(lambda s: "(no stats: the last reply was interrupted)" in s, "/stats")
        tmux("send-keys", "-t", "repl", "/nope", "Enter")
        wait_for(lambda s: "unknown command /nope" in s, "the unknown-command hint")
        # readline history: Up twice recalls the line before "/nope"
        tmux("send-keys", "-t", "repl", "Up", "Up")
        wait_for(lambda s: prompt_line(s) == "> /stats", "history recall")
        # Ctrl-C at the prompt clears the line and stays; a second one exits
        tmux("send-keys", "-t", "repl", "C-c")
        s = wait_for(lambda s: "Ctrl-C again or Ctrl-D to exit" in s and prompt_line(s) == ">", "the cleared line")
        assert "[exit" not in s
        tmux("send-keys", "-t", "repl", "C-c")
        wait_for(lambda s: "[exit 0]" in s, "the exit")
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True)
