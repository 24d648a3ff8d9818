"""pymtp.template: the GGUF's Jinja chat template rendered as Hugging Face does, compared with
llama.cpp's built-in rendering (what pymtp.chat uses by default) on the default model, and
tools / tool_choice passed through; the Hermes-style fallback for templates without tools."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("jinja2")

import pymtp  # noqa: E402
from pymtp import default_model  # noqa: E402
from pymtp.chat import chat_prompt  # noqa: E402
from pymtp.template import render, render_chat, template_messages, tool_prompt  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    }
]

# A Qwen3-like template (written for this test): tools as JSON lines, calls as Hermes JSON,
# tool results in user turns, tool_choice shown when it is not "auto".
QWEN_LIKE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>{% if tool_choice and tool_choice != 'auto' %}
choice: {{ tool_choice | tojson }}{% endif %}<|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'system' %}{% continue %}{% endif %}
{%- if m.role == 'assistant' %}<|im_start|>assistant
{% if m.content %}{{ m.content }}{% endif %}
{%- for tc in m.tool_calls or [] %}
<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

# A GLM-4.5-like one: arguments iterated as a mapping.
GLM_LIKE = """[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>
{%- if m.role == 'assistant' and m.tool_calls %}{% for tc in m.tool_calls %}
<tool_call>{{ tc.function.name }}
{% for k, v in tc.function.arguments.items() %}<arg_key>{{ k }}</arg_key>
<arg_value>{{ v | tojson if v is not string else v }}</arg_value>
{% endfor %}</tool_call>{% endfor %}{% else %}
{{ m.content }}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"""


@pytest.fixture(scope="module")
def model():
    m = pymtp.Model(default_model.default_model_path(), mtp=False)
    yield m
    m.close()


CONVERSATIONS = [
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": [{"type": "text", "text": "and "}, {"type": "text", "text": "3+3?"}]},
    ],
    [{"role": "system", "content": "Multi\nline {braces} and 'quotes'"}, {"role": "user", "content": "ünïcødé ✓"}],
]


@pytest.mark.parametrize("i", range(len(CONVERSATIONS)))
def test_jinja_equals_the_builtin_rendering_when_a_system_message_leads(model, i):
    msgs = CONVERSATIONS[i]
    for gen in (True, False):
        assert render_chat(model, msgs, jinja=True, add_generation_prompt=gen) == chat_prompt(
            model, msgs, add_assistant=gen
        )


def test_without_a_system_message_the_jinja_template_adds_smollm2s_own(model):
    """The one difference: SmolLM2's template adds its default system prompt, which llama.cpp's
    built-in ChatML (what pymtp.chat renders by default) leaves out."""
    msgs = [{"role": "user", "content": "hi"}]
    builtin = chat_prompt(model, msgs)
    jinja = render_chat(model, msgs, jinja=True)
    system = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    assert jinja == system + builtin
    assert render_chat(model, msgs) == jinja  # jinja2 installed: the default
    assert render_chat(model, msgs, jinja=False) == builtin


def test_hf_environment_features():
    t = (
        "{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('no bad roles') }}{% endif %}"
        "{{ bos_token }}{{ m | tojson }}|{% generation %}{{ eos_token }}{% endgeneration %}\n"
        "{% endfor %}{{ strftime_now('%Y') | length }}"
    )
    out = render(t, [{"role": "user", "content": "é"}], bos_token="<s>", eos_token="</s>")
    assert out == '<s>{"role": "user", "content": "é"}|</s>4'  # trim_blocks ate "\n"; tojson keeps é
    with pytest.raises(ValueError, match="no bad roles"):
        render(t, [{"role": "bad", "content": ""}])
    with pytest.raises(ValueError, match="not valid Jinja"):
        render("{% for %}", "hi")
    with pytest.raises(ValueError):  # the sandbox refuses attribute games
        render("{{ messages.__class__.__mro__ }}", "hi")
    assert render("  {% if true %}\n  x{% endif %}", "hi") == "  x"  # lstrip_blocks, trim_blocks


def test_tools_and_tool_choice_reach_a_template_that_renders_them(model):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    out = render_chat(
        model,
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Weather?"}],
        template=QWEN_LIKE,
        tools=TOOLS,
        tool_choice=choice,
    )
    assert out.startswith("<|im_start|>system\nS\n\n# Tools\n<tools>\n" + json.dumps(TOOLS[0]) + "\n</tools>")
    assert 'choice: {"type": "function", "function": {"name": "get_weather"}}' in out
    assert "You may call" not in out  # the template's own tool format, not Hermes'
    assert out.endswith("<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n")


def test_tool_calls_in_history_arguments_as_objects(model):
    history = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "unit": "c"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"},
    ]
    qwen = render_chat(model, history, template=QWEN_LIKE, tools=TOOLS)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}\n</tool_call>' in qwen
    assert "<tool_response>\n-3 C\n</tool_response>" in qwen
    glm = render_chat(model, history, template=GLM_LIKE)
    assert (
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"
        "<arg_key>unit</arg_key>\n<arg_value>c</arg_value>\n</tool_call>"
    ) in glm
    assert history[1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo", "unit": "c"}'  # not mutated


def test_the_default_model_gets_hermes_tool_instructions(model):
    """SmolLM2's ChatML template has no tool format: the tools go in a Hermes-style system
    message, ahead of the conversation (jinja and built-in alike), history calls as text."""
    msgs = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "-3 C"},
    ]
    for jinja in (None, False):
        out = render_chat(model, msgs, tools=TOOLS, jinja=jinja)
        assert out.startswith("<|im_start|>system\n" + tool_prompt(TOOLS) + "<|im_end|>\n<|im_start|>user\n")
        assert (
            '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
            "</tool_call><|im_end|>" in out
        )
        assert "<|im_start|>user\n<tool_response>\n-3 C\n</tool_response><|im_end|>" in out
    forced = tool_prompt(TOOLS, {"type": "function", "function": {"name": "get_weather"}})
    assert forced.endswith("You must call the function 'get_weather' now.")


def test_template_messages_checks_and_keeps_fields():
    msgs = template_messages(
        [
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "r",
                "tool_calls": [{"function": {"name": "f", "arguments": "not json"}}],
            }
        ]
    )
    assert msgs[0]["content"] is None and msgs[0]["reasoning_content"] == "r"
    assert msgs[0]["tool_calls"][0]["function"]["arguments"] == "not json"
    assert template_messages("hi") == [{"role": "user", "content": "hi"}]
    for bad in ([], [{"content": "x"}], [{"role": "user", "content": [{"type": "image_url"}]}]):
        with pytest.raises(ValueError):
            template_messages(bad)


def test_builtin_names_and_missing_jinja_fall_back(model, monkeypatch):
    msgs = [{"role": "user", "content": "hi"}]
    assert render_chat(model, msgs, template="chatml") == chat_prompt(model, msgs, template="chatml")
    with pytest.raises(ValueError, match="built-in name"):
        render_chat(model, msgs, template="chatml", jinja=True)
    import pymtp.template as tm

    monkeypatch.setattr(tm, "_jinja", lambda: None)
    assert render_chat(model, msgs) == chat_prompt(model, msgs)  # no jinja2: llama.cpp's rendering


def test_chat_with_a_forced_tool_call_returns_a_valid_call(model):
    """pymtp.chat(tools=, tool_choice=) on the default model: the output is one Hermes call
    whose arguments follow the tool's schema (greedy, forced by pymtp.tools.forced_call)."""
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("llguidance")
    from pymtp.tools import parse_tool_calls

    with pymtp.Session(model, n_ctx=1024) as s:
        r = pymtp.chat(
            "What is the weather in Paris?",
            s,
            tools=TOOLS,
            max_tokens=80,
            speculative=False,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )
    reply = parse_tool_calls(r.text, "hermes", TOOLS)
    assert r.finish_reason == "stop" and reply.content is None and len(reply.tool_calls) == 1, r.text
    call = reply.tool_calls[0]["function"]
    assert call["name"] == "get_weather"
    jsonschema.validate(json.loads(call["arguments"]), TOOLS[0]["function"]["parameters"])
