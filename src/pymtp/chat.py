"""pymtp.chat: generate an assistant reply to chat messages with the model's chat template.

    import pymtp
    reply = pymtp.chat([{"role": "user", "content": "Write a haiku about caching."}])
    print(reply.text)

The messages are formatted with the GGUF's chat template (llama.cpp's built-in
template support: the template is recognised, not run as Jinja), tokenized with
special tokens parsed, and generated from. Generation stops at end-of-generation
tokens (EOS, end of turn) and also at the template's end-of-turn marker when it
appears as text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, cast

from .generate import ModelLike, TextStream, generate, stream
from .model import Model
from .session import Session, as_session
from .stats import GenerationResult
from .template import content_text

__all__ = [
    "chat",
    "chat_stream",
    "chat_prompt",
    "chat_prompt_tokens",
    "chat_stop_strings",
    "end_marker_stops",
    "merge_stops",
    "normalize_messages",
]

Message = dict[str, Any]

_PROBE = ("\x01PYMTPQ\x01", "\x01PYMTPA\x01", "\x01PYMTPU\x01")
# A special-token-looking marker: <|...|>, <...>, </s>, [/INST]-like tags, DeepSeek's fullwidth bars.
_MARKER = re.compile(r"<[|｜]?[^<>\s]{1,40}?[|｜]?>|\[/?[A-Z_]{2,20}\]|\[\|[a-z_]{2,20}\|\]")
# Markers that start a new turn rather than end one (never stops by themselves).
_OPENERS = ("<|im_start|>", "<start_of_turn>", "<|start_header_id|>", "<s>", "[INST]", "<|begin_of_text|>")
# Well-known end-of-turn markers, used when the probe finds none.
_KNOWN_ENDS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<end_of_turn>",
    "<|end|>",
    "<|user|>",
    "<|observation|>",
    "<｜end▁of▁sentence｜>",
    "<|endoftext|>",
    "<|end_of_text|>",
)


def normalize_messages(messages: str | Message | Iterable[Message]) -> list[dict[str, str]]:
    """Messages as a list of {"role", "content"} dicts with string content.

    A plain string is one user message; content may be OpenAI-style parts
    ([{"type": "text", "text": ...}, ...]), whose text parts are joined."""
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if isinstance(messages, dict):
        messages = [messages]
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise ValueError(f"message {i} must be a dict with 'role' and 'content', got {m!r}")
        role, content = m["role"], m.get("content")
        if not isinstance(role, str) or not role:
            raise ValueError(f"message {i}: role must be a non-empty string")
        content = content_text(content, i) or ""
        out.append({"role": role, "content": content})
    if not out:
        raise ValueError("messages is empty: give at least one message")
    return out


def chat_prompt(
    model: Model,
    messages: str | Message | Iterable[Message],
    *,
    template: str | None = None,
    add_assistant: bool = True,
) -> str:
    """The prompt text the chat template makes of messages (ending with the assistant header).

    template: a llama.cpp built-in template name ("chatml", "llama3", "gemma", ...)
    or a template text; default the GGUF's own. UnsupportedError when there is none."""
    return model.apply_chat_template(normalize_messages(messages), add_assistant=add_assistant, template=template)


def chat_stop_strings(model: Model, template: str | None = None) -> tuple[str, ...]:
    """End-of-turn markers of the chat template, as stop strings.

    Found by formatting a probe conversation and reading the marker that follows
    the assistant's content (e.g. "<|im_end|>" for ChatML). Empty when the
    template ends a turn with plain text only, or the model has no template."""
    try:
        probe = model.apply_chat_template(
            [
                {"role": "user", "content": _PROBE[0]},
                {"role": "assistant", "content": _PROBE[1]},
                {"role": "user", "content": _PROBE[2]},
            ],
            add_assistant=False,
            template=template,
        )
    except Exception:
        return ()
    i, j = probe.find(_PROBE[1]), probe.find(_PROBE[2])
    if i < 0 or j < 0:
        return ()
    tail = probe[i + len(_PROBE[1]) : j]
    for m in _MARKER.finditer(tail):
        marker = m.group(0)
        if marker not in _OPENERS:
            return (marker,)
    text = template or model.chat_template() or ""
    return tuple(k for k in _KNOWN_ENDS if k in text)[:1]


def end_marker_stops(model: Model, template: str | None = None) -> tuple[str, ...]:
    """The template's end-of-turn markers that need a stop string.

    A marker that is one special token of the vocabulary is left out: an
    end-of-generation token stops generation by itself, and special tokens are
    not rendered as text, so a stop string could never match it (and would only
    hold streamed text back). What remains are markers the model writes as
    plain text (a template applied to a model that lacks its tokens)."""
    out = []
    for marker in chat_stop_strings(model, template):
        toks = model.tokenize(marker, add_special=False, parse_special=True)
        if len(toks) == 1 and (model.is_eog(toks[0]) or not model.token_bytes(toks[0])):
            continue
        out.append(marker)
    return tuple(out)


def chat_prompt_tokens(model: Model | Session, prompt: str) -> list[int]:
    """Token ids of a templated prompt (special tokens parsed, one BOS)."""
    toks = model.tokenize(prompt, add_special=True, parse_special=True)
    # Templates that write the BOS themselves would get a second one from add_special.
    if model.bos is not None and len(toks) >= 2 and toks[0] == model.bos and toks[1] == model.bos:
        toks = toks[1:]
    return toks


def merge_stops(user: str | Sequence[str] | None, extra: tuple[str, ...]) -> list[str]:
    """The user's stop strings, then each extra one not already there."""
    stops = [user] if isinstance(user, str) else list(user or [])
    for s in extra:
        if s not in stops:
            stops.append(s)
    return stops


def _prepare(
    messages: str | Message | Iterable[Message],
    session: Session,
    template: str | None,
    stop: str | Sequence[str] | None,
    stop_at_end_marker: bool,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
    jinja: bool | None = None,
    generate_kwargs: dict[str, Any] | None = None,
) -> tuple[list[int], list[str]]:
    if tools or jinja:
        # The GGUF's Jinja template with tools (pymtp.template); without tools and jinja, the
        # built-in template support as before.
        from .template import render_chat

        prompt = render_chat(
            session.model, messages, template=template, tools=tools, tool_choice=tool_choice, jinja=jinja
        )
    else:
        prompt = chat_prompt(session.model, messages, template=template)
    forced = _forced_tools(tools, tool_choice)
    if forced and generate_kwargs is not None and generate_kwargs.get("constraint") is None:
        from .grammar import Constraint
        from .tools import forced_call, tool_format

        fmt = tool_format(template or session.model.chat_template())
        generate_kwargs["constraint"] = Constraint(session.model, **forced_call(forced, fmt, session.model)).matcher()
    extra = end_marker_stops(session.model, template) if stop_at_end_marker else ()
    return chat_prompt_tokens(session.model, prompt), merge_stops(stop, extra)


def _forced_tools(tools: Sequence[dict[str, Any]] | None, tool_choice: Any) -> list[dict[str, Any]] | None:
    """The tools a tool_choice forces a call of: the named one, or all for "required"."""
    if not tools or tool_choice in (None, "auto", "none"):
        return None
    if tool_choice == "required":
        return list(tools)
    name = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    chosen = [t for t in tools if t.get("function", t).get("name") == name]
    if not chosen:
        raise ValueError(f"tool_choice names {name!r}, which is not one of the tools")
    return chosen


def chat(
    messages: str | Message | Iterable[Message],
    model: ModelLike = None,
    *,
    template: str | None = None,
    stop: str | Sequence[str] | None = None,
    stop_at_end_marker: bool = True,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
    jinja: bool | None = None,
    **generate_kwargs: Any,
) -> GenerationResult:
    """Generate the assistant's reply to chat messages.

    messages: [{"role": "system" | "user" | "assistant", "content": str}, ...]
    (a plain string is one user message). model: as for generate().
    template: override the GGUF's chat template (a llama.cpp built-in name such
    as "chatml", or a template text). stop: extra stop strings; the template's
    end-of-turn marker is added when the model would write it as plain text
    (end_marker_stops), unless stop_at_end_marker=False.
    tools, tool_choice: OpenAI function tools, given to the GGUF's Jinja template
    (pymtp.template; a Hermes-style system message for a template without tools);
    tool_choice naming a function or "required" constrains the output to one call
    (pymtp.tools.forced_call). Parse calls with pymtp.tools.parse_tool_calls(result.text, ...).
    jinja: True renders the GGUF's template with jinja2 even without tools; None (default)
    only when tools are given; False never.
    Other keywords go to pymtp.generate (max_tokens, temperature, speculative...).
    """
    session, made = as_session(model)
    try:
        tokens, stops = _prepare(
            messages, session, template, stop, stop_at_end_marker, tools, tool_choice, jinja, generate_kwargs
        )
        result = generate(tokens, session, stop=stops or None, **generate_kwargs)
        return cast(GenerationResult, result)  # one prompt, one result
    finally:
        if made:
            session.close()


def chat_stream(
    messages: str | Message | Iterable[Message],
    model: ModelLike = None,
    *,
    template: str | None = None,
    stop: str | Sequence[str] | None = None,
    stop_at_end_marker: bool = True,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
    jinja: bool | None = None,
    **generate_kwargs: Any,
) -> TextStream:
    """Like chat(), but a TextStream of reply pieces (`.result` once exhausted)."""
    session, made = as_session(model)
    try:
        tokens, stops = _prepare(
            messages, session, template, stop, stop_at_end_marker, tools, tool_choice, jinja, generate_kwargs
        )
        s = stream(tokens, session, stop=stops or None, **generate_kwargs)
    except BaseException:
        if made:
            session.close()
        raise
    s.owns_session = made
    return s
