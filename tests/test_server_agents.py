"""The server for agents, on the default model with the openai client: response_format (JSON
schema, JSON object) and tools (a forced call, constrained to the tool's schema, also beside a
response_format; an automatic call, parsed from the reply), streamed and not: a streamed call's
arguments come in several deltas that join to the whole call. 127.0.0.1 only."""

from __future__ import annotations

import json

import jsonschema
import pytest
from test_server import ScriptedRunner, _Server

import pymtp
from pymtp.server import create_app
from pymtp.stats import GenerationResult, SpecStats

MODEL = "default"
CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 30},
        "population": {"type": "integer", "minimum": 0, "maximum": 100000000},
    },
    "required": ["city", "population"],
    "additionalProperties": False,
}
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["c", "f"]}},
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    }
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def served():
    session = pymtp.load(n_ctx=2048)
    app = create_app(session, model_name=MODEL)
    with _Server(app) as srv:
        srv.session, srv.app = session, app
        yield srv
    session.close()


@pytest.fixture(scope="module")
def client(served):
    return served.client()


def test_response_format_json_schema(client):
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Name a big city and its population."}],
        max_tokens=80,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}},
    )
    jsonschema.validate(json.loads(r.choices[0].message.content), CITY)
    assert r.choices[0].finish_reason == "stop"


def test_response_format_json_object_streamed(client):
    ask = [{"role": "user", "content": 'Give me a JSON object with the key "name" set to your name.'}]
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=ask, max_tokens=60, stream=True, response_format={"type": "json_object"}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop", text
    assert isinstance(json.loads(text), dict)


def test_a_bad_schema_is_a_400(served, client):
    import openai

    with pytest.raises(openai.BadRequestError, match="json_schema"):
        client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            max_tokens=8,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}},
        )


def _check_call(call):
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    jsonschema.validate(json.loads(call.function.arguments), WEATHER[0]["function"]["parameters"])


def test_a_forced_tool_call(client):
    r = client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        max_tokens=60,
        tools=WEATHER,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    _check_call(choice.message.tool_calls[0])


def _streamed_calls(chunks) -> dict[int, dict]:
    """The tool calls of a stream, their argument deltas joined: {index: {id, name, arguments, deltas}}."""
    calls: dict[int, dict] = {}
    for c in chunks:
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            call = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": "", "deltas": 0})
            call["id"] = call["id"] or tc.id
            if tc.function.name:
                call["name"] = tc.function.name
            if tc.function.arguments:
                call["arguments"] += tc.function.arguments
                call["deltas"] += 1
    return calls


def test_a_forced_tool_call_streamed(client):
    """The call's arguments arrive as they are generated, in several deltas that join to the call
    the same request gets whole."""
    kw = dict(model=MODEL, messages=ASK, max_tokens=60, tools=WEATHER, tool_choice="required")
    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls[0]
    chunks = list(client.chat.completions.create(stream=True, **kw))
    calls = _streamed_calls(chunks)
    assert list(calls) == [0] and calls[0]["id"] and calls[0]["name"] == "get_weather"
    assert calls[0]["deltas"] >= 3, calls
    assert json.loads(calls[0]["arguments"]) == json.loads(whole.function.arguments)
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER[0]["function"]["parameters"])
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_response_format_beside_a_forced_tool_call(client):
    """pydantic-ai sends both: the forced call follows the tool's schema (response_format would
    apply to a text reply), as OpenAI's API does; a bad response_format is still a 400."""
    import openai

    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}}
    for stream in (False, True):
        r = client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            max_tokens=60,
            tools=WEATHER,
            tool_choice="required",
            response_format=fmt,
            stream=stream,
        )
        if stream:
            chunks = list(r)
            call = _streamed_calls(chunks)[0]
            assert call["name"] == "get_weather" and chunks[-1].choices[0].finish_reason == "tool_calls"
            jsonschema.validate(json.loads(call["arguments"]), WEATHER[0]["function"]["parameters"])
        else:
            assert r.choices[0].finish_reason == "tool_calls"
            _check_call(r.choices[0].message.tool_calls[0])
    with pytest.raises(openai.BadRequestError, match="json_schema"):
        client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            max_tokens=8,
            tools=WEATHER,
            tool_choice="required",
            response_format={"type": "json_schema", "json_schema": {"schema": {"type": "x"}}},
        )


def _scripted(reply: str, piece: int = 4):
    """A script for ScriptedRunner: reply in pieces of a few characters, then its result (the
    135M model does not call tools on its own; what is under test is the server's parsing and
    streaming of whatever the model writes)."""

    def script(job):
        events = [("piece", reply[i : i + piece]) for i in range(0, len(reply), piece)]
        return events + [("done", GenerationResult(reply, [1, 2, 3], list(job.prompt()), "stop", SpecStats()))]

    return script


@pytest.fixture
def scripted(served):
    """scripted(reply): the served app answers with reply instead of running the model."""
    real = served.app.state.runner

    def use(reply: str) -> None:
        if served.app.state.runner is not real:
            served.app.state.runner.close()
        served.app.state.runner = ScriptedRunner(served.session, _scripted(reply))

    yield use
    if served.app.state.runner is not real:
        served.app.state.runner.close()
    served.app.state.runner = real


HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}\n</tool_call>'


@pytest.mark.parametrize("stream", [False, True])
def test_an_automatic_tool_call_is_parsed(client, scripted, stream):
    scripted(HERMES_CALL)
    r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=60, tools=WEATHER, stream=stream)
    if stream:
        chunks = list(r)
        calls = _streamed_calls(chunks)
        assert len(calls) == 1 and calls[0]["deltas"] >= 3  # the arguments, as they came
        finish = chunks[-1].choices[0].finish_reason
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert finish == "tool_calls" and not content
        assert calls[0]["name"] == "get_weather"
        assert json.loads(calls[0]["arguments"]) == {"city": "Oslo", "unit": "c"}
    else:
        msg, finish = r.choices[0].message, r.choices[0].finish_reason
        calls, content = msg.tool_calls, msg.content
        assert finish == "tool_calls" and len(calls) == 1 and not content
        _check_call(calls[0])
        assert json.loads(calls[0].function.arguments) == {"city": "Oslo", "unit": "c"}
    # plain text stays text
    scripted("It is sunny.")
    r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=60, tools=WEATHER)
    assert r.choices[0].message.content == "It is sunny." and not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "stop"


def test_text_before_a_streamed_call_streams_as_content(client, scripted):
    scripted("Let me look that up.\n" + HERMES_CALL)
    kw = dict(model=MODEL, messages=ASK, max_tokens=60, tools=WEATHER)
    whole = client.chat.completions.create(**kw).choices[0].message
    chunks = list(client.chat.completions.create(stream=True, **kw))
    content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(content) == whole.content == "Let me look that up."
    first_call = next(i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.tool_calls)
    last_content = max(i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.content)
    assert last_content < first_call  # the text went out before the call began
    assert json.loads(_streamed_calls(chunks)[0]["arguments"]) == json.loads(whole.tool_calls[0].function.arguments)


def test_a_conversation_with_a_tool_result(client):
    messages = ASK + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "c"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temperature": 18})},
    ]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, tools=WEATHER, tool_choice="none")
    assert r.choices[0].message.content
