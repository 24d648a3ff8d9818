"""pymtp.template: chat prompts from the GGUF's own Jinja chat template, as Hugging Face does.

    text = render_chat(model, messages, tools=tools, tool_choice="auto")

The template (GGUF metadata ``tokenizer.chat_template``, or one given) runs in jinja2's
immutable sandbox with Hugging Face's settings: trim_blocks, lstrip_blocks, loop controls,
``raise_exception``, ``strftime_now``, a ``tojson`` filter (ensure_ascii=False), and the
variables ``messages``, ``tools``, ``tool_choice``, ``add_generation_prompt``, ``bos_token``
and ``eos_token`` (plus any ``extra`` ones, e.g. ``enable_thinking``).

Falls back to llama.cpp's built-in template support (what pymtp.chat does by default) when
jinja2 is missing, the model has no template text, or the template is a built-in name
("chatml", "llama3"...). Tools then go into a Hermes-style system message (tool_prompt),
as they do for a Jinja template that never mentions ``tools`` (SmolLM2's, the default
model's: ChatML with no tool format).

Messages keep their OpenAI fields (tool_calls, tool_call_id, name, reasoning_content); a
tool call's ``arguments`` JSON string is given to the template as an object, as vLLM does,
since templates such as GLM-4.5's iterate over ``arguments.items()``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from datetime import datetime
from functools import lru_cache
from typing import Any

__all__ = ["render", "render_chat", "template_messages", "tool_prompt", "uses_jinja", "template_mentions_tools"]


def _jinja():
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError:
        return None
    return jinja2


def uses_jinja(template: str | None) -> bool:
    """Whether a template is Jinja text (rather than a llama.cpp built-in name) and jinja2 is here."""
    if not template:
        return False
    return ("{{" in template or "{%" in template) and _jinja() is not None


def template_mentions_tools(template: str) -> bool:
    """Whether a Jinja template renders a tool list itself."""
    return "tools" in template


@lru_cache(maxsize=16)
def _compile(template: str):
    jinja2 = _jinja()
    if jinja2 is None:
        raise ImportError("Jinja chat templates need jinja2: pip install 'pymtp-llm[templates]'")
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _Generation(Extension):
        """``{% generation %}...{% endgeneration %}`` (HF's assistant-mask tags): the body as is."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body, lineno=lineno)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise ValueError(f"the chat template is not valid Jinja (line {e.lineno}): {e.message}") from None


def content_text(content, i: int) -> str | None:
    """A message's content as text: a string, or OpenAI's list of text parts joined (None stays
    None); other parts (images...) raise ValueError naming message i."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and p.get("type") == "text":
                parts.append(str(p.get("text", "")))
            else:
                kind = p.get("type") if isinstance(p, dict) else type(p).__name__
                raise ValueError(f"message {i}: only text content is supported, got a {kind!r} part")
        return "".join(parts)
    raise ValueError(f"message {i}: content must be a string or a list of text parts")


def template_messages(messages: str | dict | Iterable[dict]) -> list[dict[str, Any]]:
    """Messages as a template expects them: text content (parts joined; None kept for an
    assistant turn with tool calls only, "" otherwise), other fields kept, tool-call
    arguments as objects where the JSON string parses."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    elif isinstance(messages, dict):
        messages = [messages]
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not m["role"]:
            raise ValueError(f"message {i} must be a dict with a non-empty 'role', got {m!r}")
        m = copy.deepcopy(m)
        m["content"] = content_text(m.get("content"), i)
        if m["content"] is None and not m.get("tool_calls"):
            m["content"] = ""
        calls = m.get("tool_calls")
        if calls:
            for c in calls:
                fn = c.get("function") if isinstance(c, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                    try:
                        fn["arguments"] = json.loads(fn["arguments"])
                    except json.JSONDecodeError:
                        pass
        out.append(m)
    if not out:
        raise ValueError("messages is empty: give at least one message")
    return out


def render(
    template: str,
    messages,
    *,
    tools: list[dict] | None = None,
    tool_choice: Any = None,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
    **extra,
) -> str:
    """Render a Jinja chat template as Hugging Face's apply_chat_template(tokenize=False) does.

    A template's raise_exception and Jinja errors become ValueError."""
    jinja2 = _jinja()
    t = _compile(template)
    try:
        return t.render(
            messages=template_messages(messages),
            tools=tools or None,
            tool_choice=tool_choice,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            **extra,
        )
    except jinja2.exceptions.TemplateError as e:
        raise ValueError(f"the chat template refused the messages: {e}") from None


def tool_prompt(tools: list[dict], tool_choice: Any = None) -> str:
    """Hermes-style tool instructions (Qwen2.5's and NousResearch's wording) for a template
    without a tool format: the tools as JSON in <tools></tools>, calls as JSON in
    <tool_call></tool_call> tags (pymtp.tools parses them back)."""
    lines = [
        "# Tools",
        "",
        "You may call one or more functions to assist with the user query.",
        "",
        "You are provided with function signatures within <tools></tools> XML tags:",
        "<tools>",
    ]
    lines += [json.dumps(t, ensure_ascii=False) for t in tools]
    lines += [
        "</tools>",
        "",
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:",
        "<tool_call>",
        '{"name": <function-name>, "arguments": <args-json-object>}',
        "</tool_call>",
    ]
    name = _forced_name(tool_choice)
    if name:
        lines += ["", f"You must call the function {name!r} now."]
    elif tool_choice == "required":
        lines += ["", "You must call at least one function now."]
    return "\n".join(lines)


def _forced_name(tool_choice) -> str | None:
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return fn["name"]
    return None


def _with_tool_prompt(messages: list[dict], tools, tool_choice) -> list[dict]:
    """Messages with tool_prompt in the system message (a new first one if there is none), and
    earlier tool calls / results written as Hermes text, for templates that know no tools."""
    prompt = tool_prompt(tools, tool_choice)
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function", c)
                calls.append(
                    "<tool_call>\n"
                    + json.dumps({"name": fn.get("name"), "arguments": fn.get("arguments")}, ensure_ascii=False)
                    + "\n</tool_call>"
                )
            m["content"] = "\n".join(([m["content"]] if m.get("content") else []) + calls)
            del m["tool_calls"]
        elif m["role"] == "tool":
            m = {"role": "user", "content": f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"}
        out.append(m)
    if out and out[0]["role"] == "system":
        out[0] = {**out[0], "content": (out[0]["content"] + "\n\n" + prompt) if out[0]["content"] else prompt}
    else:
        out.insert(0, {"role": "system", "content": prompt})
    return out


def _special_text(model, token: int | None) -> str:
    if token is None:
        return ""
    return model.token_bytes(token, render_special=True).decode("utf-8", "replace")


def render_chat(
    model,
    messages,
    *,
    template: str | None = None,
    tools: list[dict] | None = None,
    tool_choice: Any = None,
    add_generation_prompt: bool = True,
    jinja: bool | None = None,
    **extra,
) -> str:
    """The prompt text for messages, from template (a Jinja text or a llama.cpp built-in name;
    default: the GGUF's own template).

    jinja: True: render a Jinja template with jinja2 (ImportError without it); False: llama.cpp's
    built-in support only; None: jinja2 when the template is Jinja text and jinja2 is
    installed, else the built-in one. Tools reach a Jinja template that renders them;
    otherwise they go in a Hermes-style system message (tool_prompt)."""
    model = getattr(model, "model", model)
    text = template if template is not None else model.chat_template()
    msgs = template_messages(messages)
    if tools and not isinstance(tools, list):
        raise ValueError("tools must be a list of OpenAI tool objects")
    is_jinja = bool(text) and ("{{" in text or "{%" in text)
    use = is_jinja and (jinja if jinja is not None else _jinja() is not None)
    if jinja and not is_jinja:
        raise ValueError(
            "jinja=True needs a Jinja template text; this one is "
            + ("missing" if not text else f"a built-in name ({text!r})")
        )
    if tools and not (use and template_mentions_tools(text)):
        msgs = _with_tool_prompt(msgs, tools, tool_choice)
        tools = None
    if use:
        return render(
            text,
            msgs,
            tools=tools,
            tool_choice=tool_choice,
            add_generation_prompt=add_generation_prompt,
            bos_token=_special_text(model, model.bos),
            eos_token=_special_text(model, model.eos),
            **extra,
        )
    if any(m.get("tool_calls") for m in msgs):
        raise ValueError("tool calls in messages need tools= (or a Jinja template)")
    flat = [{"role": m["role"], "content": m["content"] or ""} for m in msgs]
    return model.apply_chat_template(flat, add_assistant=add_generation_prompt, template=template)
