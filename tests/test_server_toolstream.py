"""server.toolstream: a reply's text, fed in pieces of any size, gives content and tool-call deltas
that join to what pymtp.tools.parse_tool_calls gets from the whole text, in every format; a
call's arguments come in several deltas as they are written. No model needed."""

from __future__ import annotations

import json
import random

import pytest

from pymtp.server.toolstream import ToolCallStream
from pymtp.tools import parse_tool_calls

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"enum": ["c", "f"]},
                    "days": {"type": "integer"},
                    "tags": {"type": "array"},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "search", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
    },
]

REPLIES = {
    "hermes": [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa\\"ris {x} </b>", "unit": "c"}}\n</tool_call>',
        'Let me check.\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "tags": [1, {"a": "]"}]}}'
        '\n</tool_call>\n<tool_call>\n{"name": "search", "arguments": {"query": "rain"}}\n</tool_call>',
        "No tools here, just a < and a <tool_ in the text.",
        '<tool_call>{"arguments": {"city": "X"}, "name": "get_weather"}</tool_call>',  # name last: whole
        '<tool_call>{"name": "nope", "arguments": {}}</tool_call> then '  # not offered: text
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Y"}}</tool_call>',
        '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"q\\"}"}</tool_call>',  # a JSON string: whole
        '<tool_call>\n{"name": "search", "arguments": {"query": "cut short"}}',  # no closing tag
        "  Leading spaces and a trailing one ",
    ],
    "glm45": [
        '<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New "York"\n</arg_val NY</arg_value>\n'
        "<arg_key>days</arg_key>\n<arg_value>5</arg_value>\n<arg_key>tags</arg_key>\n<arg_value>[1, 2]</arg_value>\n"
        "</tool_call>",
        "Sure <tool_call>search\n</tool_call>",
        "<tool_call>get_weather\n<arg_key>unit</arg_key>\n<arg_value>f</arg_value>\n</tool_call>"
        "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>snow</arg_value>\n</tool_call>",
    ],
    "qwen3_xml": [
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n\n</parameter>\n<parameter=days>\n4\n"
        "</parameter>\n</function>\n</tool_call>",
        "hi <tool_call>\n<function=search>\n<parameter=query>\nA</b>\n<x\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=search>\n<parameter=query>no newlines</parameter>\n</function>\n</tool_call>",
    ],
}


def streamed(fmt: str, text: str, rng: random.Random, most: int) -> tuple[str, list[dict], list[int]]:
    """(content, [{name, arguments}], argument deltas per call) of text fed in random pieces."""
    ts = ToolCallStream(fmt, TOOLS)
    deltas, i = [], 0
    while i < len(text):
        n = rng.randint(1, most)
        deltas += ts.feed(text[i : i + n])
        i += n
    deltas += ts.finish()
    calls: dict[int, dict] = {}
    for d in deltas:
        assert set(d) in ({"content"}, {"tool_calls"}), d
        for tc in d.get("tool_calls", ()):
            c = calls.setdefault(tc["index"], {"name": None, "arguments": "", "deltas": 0})
            if "id" in tc:
                assert c["name"] is None and tc["id"].startswith("call_") and tc["type"] == "function"
                c["name"] = tc["function"]["name"]
            c["arguments"] += tc["function"]["arguments"]
            c["deltas"] += bool(tc["function"]["arguments"])
    assert sorted(calls) == list(range(len(calls)))
    content = "".join(d.get("content", "") for d in deltas)
    return content, [calls[k] for k in sorted(calls)], [calls[k]["deltas"] for k in sorted(calls)]


@pytest.mark.parametrize("fmt, text", [(f, t) for f, ts in REPLIES.items() for t in ts])
def test_pieces_join_to_the_whole_parse(fmt, text):
    want = parse_tool_calls(text, fmt, TOOLS)
    expected = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in want.tool_calls]
    rng = random.Random(hash(text) & 0xFFFF)
    for most in (1, 3, 8, len(text)):
        for _ in range(30 if most < len(text) else 1):
            content, calls, _ = streamed(fmt, text, rng, most)
            assert [(c["name"], json.loads(c["arguments"])) for c in calls] == expected
            assert content == (want.content or "").lstrip()


def test_arguments_arrive_as_they_are_written():
    """Fed token-sized pieces, a call is announced before its arguments end, and they come in
    several deltas; text before it goes out before the call begins."""
    text = REPLIES["hermes"][1]
    ts = ToolCallStream("hermes", TOOLS)
    seen, announced_at, done_at = [], None, None
    for i in range(0, len(text), 3):
        for d in ts.feed(text[i : i + 3]):
            seen.append(d)
            for tc in d.get("tool_calls", ()):
                if "id" in tc and announced_at is None:
                    announced_at = i
        if '"Oslo"' in text[:i] and done_at is None:
            done_at = i
    seen += ts.finish()
    assert announced_at is not None and announced_at < done_at  # the name before the arguments end
    first_call = next(k for k, d in enumerate(seen) if "tool_calls" in d)
    assert all("content" not in d for d in seen[first_call:])
    assert "".join(d["content"] for d in seen[:first_call]) == "Let me check."
    _, _, per_call = streamed("hermes", text, random.Random(0), 3)
    assert min(per_call) >= 3
    assert ts.streamed_all()


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="unknown tool-call format"):
        ToolCallStream("nope", TOOLS)
