"""Every script in examples/ runs as a script (run_name "__main__", its own argv) on the default
model, and what it leaves behind is checked: the batch against each prompt decoded alone, the
agent's tool call against the tool's schema, the extracted JSON against the texts, the resumed
chat against a session that read the whole conversation again.

(examples/quickstart.ipynb is run by test_notebook.py.)"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import jsonschema
import pytest

import pymtp

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str, monkeypatch) -> dict:
    """Run examples/<name> as `python examples/<name> args...` would; its globals afterwards."""
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / name), *args])
    monkeypatch.delenv("PYMTP_MODEL", raising=False)  # the default model, as a user gets it
    return runpy.run_path(str(EXAMPLES / name), run_name="__main__")


@pytest.fixture(scope="module")
def default_session():
    with pymtp.load() as session:
        yield session


def test_every_example_is_tested():
    tested = {"batch.py", "agent_tools.py", "extract_json.py", "chat_resume.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_batch(monkeypatch, capsys, default_session, same_greedy):
    g = run_example("batch.py", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    prompts, results = g["PROMPTS"], g["results"]
    assert len(results) == len(prompts)
    for prompt, result in zip(prompts, results):
        # In order, and each what its prompt gives alone with plain decoding (near-ties aside).
        alone = pymtp.generate(prompt, default_session, max_tokens=48, speculative=False)
        assert result.prompt_tokens == alone.prompt_tokens
        same_greedy(default_session.model, result.prompt_tokens, result.tokens, alone.tokens)
        assert result.finish_reason in ("stop", "length") and result.stats.n_drafted > 0
        assert f"--- {prompt!r}: {len(result.tokens)} tokens" in out
    same_greedy.assert_ties_rare()
    assert f"{len(prompts)} prompts, {sum(len(r.tokens) for r in results)} tokens in" in out


def test_agent_tools(monkeypatch, capsys):
    g = run_example("agent_tools.py", "What is the weather in Paris?", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    messages, answer = g["messages"], g["answer"]
    calls = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert len(calls) == 1 and calls[0]["function"]["name"] == "get_weather"
    args = json.loads(calls[0]["function"]["arguments"])
    jsonschema.validate(args, g["TOOLS"][0]["function"]["parameters"])  # the forced call is a valid one
    assert args["city"] == "Paris"
    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == [calls[0]["id"]]
    assert json.loads(tool_messages[0]["content"]) == g["get_weather"]("Paris")
    # The answer is words built on the tool's result (14 degrees), not another call.
    assert "<tool_call>" not in answer and "14" in answer
    assert f"answer:      {answer}" in out and "tool call:   get_weather({'city': 'Paris'})" in out


def test_extract_json_through_the_server(monkeypatch, capsys):
    from pymtp_testing.server_load import start_server

    with start_server(["--model-name", "smollm2"]) as server:
        g = run_example("extract_json.py", f"{server.url}/v1", monkeypatch=monkeypatch)
    lines = capsys.readouterr().out.splitlines()
    person = g["Person"]
    people = g["people"]
    assert len(people) == len(g["TEXTS"]) == len(lines)
    assert all(isinstance(p, person) for p in people)
    assert people[0] == person(name="Maria Lopez", age=34, city="Lyon")
    assert "Becker" in people[1].name and people[1].age == 61
    for p, line in zip(people, lines):
        assert person.model_validate_json(line.split("    (")[0]) == p
        assert "of drafts accepted" in line


def test_chat_resume(monkeypatch, capsys, tmp_path, default_session, same_greedy):
    g = run_example("chat_resume.py", str(tmp_path), monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    stats, reply, messages = g["stats"], g["reply"], g["messages"]
    assert (tmp_path / "conversation.json").is_file() and (tmp_path / "conversation.npz").is_file()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    # The new session read the saved caches instead of the conversation: every saved position
    # was reused, and that is most of the prompt.
    assert stats.reused_saved and stats.n_reused == g["saved"]
    assert stats.n_reused > 0.8 * stats.n_prompt
    assert f"resumed: {stats.n_reused} of {stats.n_prompt} prompt positions" in out
    # ... and the reply is the one a session that reads everything again gives.
    fresh = pymtp.chat(messages, default_session, max_tokens=48)
    assert fresh.stats.n_reused < stats.n_reused
    same_greedy(default_session.model, fresh.prompt_tokens, reply.tokens, fresh.tokens)
