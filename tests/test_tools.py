"""pymtp.tools: hand-written outputs in each family's tool-call format parsed into OpenAI
tool_calls (malformed ones stay content, nothing raises), and the forced-call grammars
accept exactly well-formed calls of the tool."""

from __future__ import annotations

import json
import re

import pytest

from pymtp.tools import FORMATS, call_schema, forced_call, parse_tool_calls, tool_format

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "filters": {"type": "object"}},
                "required": ["query"],
            },
        },
    },
]


def fn(call):
    assert call["type"] == "function" and re.fullmatch(r"call_[0-9a-f]{24}", call["id"])
    assert isinstance(call["function"]["arguments"], str)
    return call["function"]["name"], json.loads(call["function"]["arguments"])


# ---- parsing ---------------------------------------------------------------------------------


def test_hermes_calls():
    text = (
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search", "arguments": "{\\"query\\": \\"snow\\"}"}\n</tool_call>'
    )
    r = parse_tool_calls(text, "hermes", TOOLS)
    assert r.content == "Let me check."
    assert [fn(c) for c in r.tool_calls] == [
        ("get_weather", {"city": "Oslo", "days": 2}),
        ("search", {"query": "snow"}),
    ]
    assert r.tool_calls[0]["id"] != r.tool_calls[1]["id"]
    assert r.message() == {"role": "assistant", "content": "Let me check.", "tool_calls": r.tool_calls}
    only = parse_tool_calls('<tool_call>{"name": "search", "parameters": {"query": "x"}}</tool_call>', "hermes")
    assert only.content is None and [fn(c) for c in only.tool_calls] == [("search", {"query": "x"})]


def test_an_unterminated_last_call_is_parsed_when_complete():
    r = parse_tool_calls('<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n', "hermes", TOOLS)
    assert [fn(c) for c in r.tool_calls] == [("search", {"query": "x"})] and r.content is None
    cut = '<tool_call>\n{"name": "search", "argum'
    assert parse_tool_calls(cut, "hermes", TOOLS).content == cut


@pytest.mark.parametrize(
    "text",
    [
        "no calls here",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"\n</tool_call>',  # bad JSON
        '<tool_call>{"arguments": {"city": "Oslo"}}</tool_call>',  # no name
        '<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>',  # not offered
        '<tool_call>["get_weather"]</tool_call>',
        '<tool_call>{"name": "search", "arguments": "not json"}</tool_call>',
        "<tool_call></tool_call>",
        "",
    ],
)
def test_malformed_hermes_stays_content(text):
    r = parse_tool_calls(text, "hermes", TOOLS)
    assert r.tool_calls == [] and r.content == (text or None)


def test_a_good_call_next_to_a_bad_one():
    bad = '<tool_call>{"name": "get_weather", "arguments": {</tool_call>'
    r = parse_tool_calls(
        bad + '\n<tool_call>{"name": "search", "arguments": {"query": "q"}}</tool_call>', "hermes", TOOLS
    )
    assert r.content == bad and [fn(c)[0] for c in r.tool_calls] == ["search"]


def test_glm45_calls():
    text = (
        "<think>Need weather.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>42</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
        "<tool_call>search<arg_key>query</arg_key><arg_value>a <b> c</arg_value>"
        '<arg_key>filters</arg_key><arg_value>{"year": 2024}</arg_value></tool_call>'
    )
    r = parse_tool_calls(text, "glm45", TOOLS)
    assert r.content == "<think>Need weather.</think>"
    # "42" stays a string: city is a string parameter; days is JSON
    assert [fn(c) for c in r.tool_calls] == [
        ("get_weather", {"city": "42", "days": 3}),
        ("search", {"query": "a <b> c", "filters": {"year": 2024}}),
    ]
    untyped = parse_tool_calls(
        "<tool_call>other\n<arg_key>n</arg_key>\n<arg_value>7</arg_value>\n</tool_call>", "glm45"
    )
    assert [fn(c) for c in untyped.tool_calls] == [("other", {"n": 7})]


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo\n</tool_call>",  # no </arg_value>
        "<tool_call>\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>",  # no name
        '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',  # Hermes, not GLM
        "<tool_call>get_weather\nstray text<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>",
    ],
)
def test_malformed_glm45_stays_content(text):
    r = parse_tool_calls(text, "glm45", TOOLS)
    assert r.tool_calls == [] and r.content == text


def test_qwen3_xml_calls_and_malformed_ones():
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
        "<parameter=days>\n5\n</parameter>\n</function>\n</tool_call>"
    )
    r = parse_tool_calls(text, "qwen3_xml", TOOLS)
    assert r.content is None and [fn(c) for c in r.tool_calls] == [
        ("get_weather", {"city": "San Francisco", "days": 5})
    ]
    for bad in (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nSF\n</tool_call>",
        "<tool_call>\nget_weather\n</tool_call>",
    ):
        assert parse_tool_calls(bad, "qwen3_xml", TOOLS).content == bad


def test_tool_format_from_templates():
    assert tool_format(None) == "hermes"
    assert tool_format("{{'<|im_start|>' + m.role}}") == "hermes"  # SmolLM2's ChatML
    assert tool_format('<tool_call>\\n{"name": ...}') == "hermes"  # Qwen3
    assert tool_format("{{ '<tool_call>' + tc.name }}<arg_key>{{ k }}</arg_key>") == "glm45"
    assert tool_format("<function={{ name }}><parameter={{ k }}>") == "qwen3_xml"
    with pytest.raises(ValueError, match="unknown tool-call format"):
        parse_tool_calls("x", "mistral")


# ---- forcing a call ------------------------------------------------------------------------------


def test_call_schema():
    s = call_schema(TOOLS[0])
    assert s["properties"]["name"] == {"const": "get_weather"}
    assert s["properties"]["arguments"] == TOOLS[0]["function"]["parameters"]
    with pytest.raises(ValueError, match="name"):
        call_schema({"type": "function", "function": {}})


GOOD = {
    "hermes": [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "f"}}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}\n</tool_call>',
    ],
    "glm45": [
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"
        "<arg_key>unit</arg_key>\n<arg_value>c</arg_value>\n</tool_call>",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>St. Olaf</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>12</arg_value>\n</tool_call>",
    ],
    "qwen3_xml": [
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nSt.\nOlaf\n</parameter>\n<parameter=days>\n"
        "4\n</parameter>\n<parameter=unit>\nf\n</parameter>\n</function>\n</tool_call>",
    ],
}
BAD = {
    "hermes": [
        '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>',  # other tool
        '<tool_call>\n{"name": "get_weather", "arguments": {"unit": "c"}}\n</tool_call>',  # city missing
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "O", "unit": "k"}}\n</tool_call>',
        'Sure! <tool_call>\n{"name": "get_weather", "arguments": {"city": "O"}}\n</tool_call>',
    ],
    "glm45": [
        "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>three</arg_value>\n</tool_call>",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"
        "<arg_key>unit</arg_key>\n<arg_value>k</arg_value>\n</tool_call>",
    ],
    "qwen3_xml": [
        "<tool_call>\n<function=search>\n<parameter=query>\nx\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=days>\n4\n</parameter>\n</function>\n</tool_call>",
    ],
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_forced_call_grammars_accept_exactly_good_calls(fmt):
    llg = pytest.importorskip("llguidance")
    from pymtp.grammar import Constraint, Vocabulary

    # a byte-level vocabulary: every output has one tokenization, byte by byte
    v = Vocabulary([bytes([b]) for b in range(255)] + [b"", b"\xff<|end|>"], [256], lambda b: list(b))
    c = Constraint(v, **forced_call(TOOLS[0], fmt))
    assert llg is not None

    def accepts(text: str) -> bool:
        m = c.matcher()
        return all(m.accept(b) for b in text.encode()) and m.is_accepting()

    for text in GOOD[fmt]:
        assert accepts(text), text
        assert [fn(x)[0] for x in parse_tool_calls(text, fmt, TOOLS).tool_calls] == ["get_weather"]
    for text in BAD[fmt]:
        assert not accepts(text), text
    both = Constraint(v, **forced_call(TOOLS, fmt))  # tool_choice "required": any tool
    m = both.matcher()
    other = {
        "hermes": '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>',
        "glm45": "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>x</arg_value>\n</tool_call>",
        "qwen3_xml": BAD["qwen3_xml"][0],
    }[fmt]
    assert all(m.accept(b) for b in other.encode()) and m.is_accepting()
