"""The server for agents, on the default model with the openai client: response_format (JSON
schema, JSON object) and tools (a forced call, constrained to the tool's schema; an automatic
call, parsed from the reply), streamed and not. 127.0.0.1 only."""

from __future__ import annotations

import json

import jsonschema
import pytest
from test_server import _Server

import pymtp
from pymtp.server import create_app
from pymtp.stats import GenerationResult, SpecStats

MODEL = "default"
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                         "population": {"type": "integer", "minimum": 0, "maximum": 100000000}},
        "required": ["city", "population"], "additionalProperties": False}
WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                    "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def served():
    session = pymtp.load(n_ctx=2048)
    with _Server(create_app(session, model_name=MODEL)) as srv:
        srv.session = session
        yield srv
    session.close()


@pytest.fixture(scope="module")
def client(served):
    return served.client()


def test_response_format_json_schema(client):
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Name a big city and its population."}], max_tokens=80,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}})
    jsonschema.validate(json.loads(r.choices[0].message.content), CITY)
    assert r.choices[0].finish_reason == "stop"


def test_response_format_json_object_streamed(client):
    ask = [{"role": "user", "content": 'Give me a JSON object with the key "name" set to your name.'}]
    chunks = list(client.chat.completions.create(model=MODEL, messages=ask, max_tokens=60, stream=True,
                                                 response_format={"type": "json_object"}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop", text
    assert isinstance(json.loads(text), dict)


def test_a_bad_schema_is_a_400(served, client):
    import openai
    with pytest.raises(openai.BadRequestError, match="json_schema"):
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}})


def _check_call(call):
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    jsonschema.validate(json.loads(call.function.arguments), WEATHER[0]["function"]["parameters"])


def test_a_forced_tool_call(client):
    r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=60, tools=WEATHER,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    _check_call(choice.message.tool_calls[0])


def test_a_forced_tool_call_streamed(client):
    chunks = list(client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=60, tools=WEATHER,
                                                 tool_choice="required", stream=True))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(calls) == 1
    _check_call(calls[0])
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


class _Scripted:
    """Stands in for TextStream: 'generates' a fixed reply (the 135M model does not call tools
    on its own; what is under test is the server's parsing of whatever the model writes)."""

    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}\n</tool_call>'

    def __init__(self, session, prompt, sampling, spec, limits, **kw):
        self.session, self.prompt = session, prompt
        self.result = None

    def __iter__(self):
        yield self.reply
        self.result = GenerationResult(self.reply, [1, 2, 3], list(self.prompt), "stop", SpecStats())

    def close(self):
        pass


@pytest.mark.parametrize("stream", [False, True])
def test_an_automatic_tool_call_is_parsed(served, client, monkeypatch, stream):
    import pymtp.server.runner as runner
    monkeypatch.setattr(runner, "TextStream", _Scripted)
    r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=60, tools=WEATHER, stream=stream)
    if stream:
        chunks = list(r)
        calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
        finish = chunks[-1].choices[0].finish_reason
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        calls, finish, content = r.choices[0].message.tool_calls, r.choices[0].finish_reason, r.choices[0].message.content
    assert finish == "tool_calls" and len(calls) == 1 and not content
    _check_call(calls[0])
    assert json.loads(calls[0].function.arguments) == {"city": "Oslo", "unit": "c"}
    # plain text stays text
    monkeypatch.setattr(_Scripted, "reply", "It is sunny.")
    r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=60, tools=WEATHER)
    assert r.choices[0].message.content == "It is sunny." and not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "stop"


def test_a_conversation_with_a_tool_result(client):
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "c"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temperature": 18})}]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, tools=WEATHER,
                                       tool_choice="none")
    assert r.choices[0].message.content
