"""Tool calls streamed as they are generated: a reply's text pieces in, OpenAI chat deltas out.

    ts = ToolCallStream("hermes", tools)
    for piece in pieces: deltas = ts.feed(piece)      # [{"content": ...} | {"tool_calls": [...]}]
    deltas = ts.finish()                               # what is left, checked against the whole text

A call is announced (id, type, name, ``"arguments": ""``) once its name is known and is one of
the tools, then its arguments follow in several deltas as the model writes them; joined, they
are the call's whole arguments (pymtp.tools.parse_tool_calls of the whole text gives the same
call). Formats (pymtp.tools): "hermes" streams the JSON arguments as written; "glm45" and
"qwen3_xml" write the arguments JSON from the tags, string values as they come, other values
when their tag closes.

Text before the first call streams as content (less leading whitespace, and whitespace or a
possible ``<tool_call>`` held until text follows); text after it is sent at the end. finish()
parses the whole text: calls it has that were not streamed (a call whose head is not the usual
``{"name": ..., "arguments": {...}}``, a call to a tool that is not offered, and every call
after those) are sent whole. A streamed call the whole text does not confirm (invalid JSON in
an unconstrained call) cannot be taken back: with a forced call the grammar rules that out.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from ..tools import FORMATS, _is_string, _tool_schemas, _value, parse_tool_calls

__all__ = ["ToolCallStream"]

MARK, END = "<tool_call>", "</tool_call>"
_HERMES_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')
_GLM_KEY = re.compile(r"\s*<arg_key>(.*?)</arg_key>\s*<arg_value>", re.S)
_XML_HEAD = re.compile(r"\s*<function=([^>\n]+)>")
_XML_KEY = re.compile(r"\s*<parameter=([^>\n]+)>")


def _held(text: str, marker: str) -> int:
    """The length of the longest end of text that could be the start of marker."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def _escaped(text: str) -> str:
    """text inside a JSON string (escaping is per character: the pieces join to the whole)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


@dataclass
class _Arg:
    """glm45 / qwen3_xml: an argument whose value is being read."""

    start: int  # where its value starts in the call's body
    is_str: bool  # a string parameter: its text streams; other values go when their tag closes
    schema: Any
    prefix: str  # ', "key": ' (sent at once before a string, with the value otherwise)
    sent: int = 0  # characters of a string value sent
    ready: bool = False  # qwen3_xml: the newline that may open the value was looked for


class _Call:
    """A call being streamed: its index among the calls, id, name and the arguments sent."""

    def __init__(self, index: int, name: str) -> None:
        self.index, self.name = index, name
        self.id = "call_" + uuid.uuid4().hex[:24]
        self.args = ""

    def header(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": ""},
        }

    def confirmed_by(self, call: dict) -> bool:
        try:
            return call["function"]["name"] == self.name and json.loads(call["function"]["arguments"]) == json.loads(
                self.args
            )
        except ValueError:
            return False


class ToolCallStream:
    """One reply's text, as pieces, into content and tool-call deltas (see the module's docstring)."""

    def __init__(self, fmt: str, tools: list[dict] | None) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown tool-call format {fmt!r}: one of {', '.join(FORMATS)}")
        self.fmt, self.tools = fmt, tools
        self.schemas = _tool_schemas(tools)
        self.text = ""
        self.pos = 0  # text[:pos] is handled
        self.raw = ""  # the text before the first call (as far as it is known)
        self.sent = ""  # the content sent
        self.calls: list[_Call] = []  # the streamed calls, in order
        self.in_call = False  # a call's body starts at body_at
        self.body_at = 0
        self.seen_call = False  # a <tool_call> came: later text waits for finish()
        self.whole = False  # a call could not be streamed: it and every later one go whole
        self._out: list[dict] = []
        self._reset_call()

    # ---- in and out ----

    def feed(self, piece: str) -> list[dict[str, Any]]:
        self.text += piece
        self._advance(final=False)
        return self._take()

    def finish(self) -> list[dict[str, Any]]:
        """The deltas left once the reply is complete."""
        self._advance(final=True)
        final = parse_tool_calls(self.text, self.fmt, self.tools)
        calls = final.tool_calls
        for i, call in enumerate(calls[len(self.calls) :], start=len(self.calls)):
            self._tool({"index": i, **call})
        content = (final.content or "").lstrip()
        if content.startswith(self.sent) and len(content) > len(self.sent):
            self._content(content[len(self.sent) :])
        return self._take()

    def streamed_all(self) -> bool:
        """Whether the streamed calls are exactly the whole text's (after finish())."""
        calls = parse_tool_calls(self.text, self.fmt, self.tools).tool_calls
        return len(calls) >= len(self.calls) and all(c.confirmed_by(f) for c, f in zip(self.calls, calls))

    def _take(self) -> list[dict[str, Any]]:
        out, self._out = self._out, []
        return out

    def _content(self, text: str) -> None:
        if text:
            self.sent += text
            if self._out and "content" in self._out[-1]:
                self._out[-1]["content"] += text
            else:
                self._out.append({"content": text})

    def _tool(self, delta: dict) -> None:
        last = self._out[-1]["tool_calls"][-1] if self._out and "tool_calls" in self._out[-1] else None
        if last is not None and last["index"] == delta["index"] and set(delta) == {"index", "function"}:
            last["function"]["arguments"] += delta["function"]["arguments"]  # one delta per feed and call
        else:
            self._out.append({"tool_calls": [delta]})

    def _args(self, text: str) -> None:
        if text:
            call = self.calls[-1]
            call.args += text
            self._tool({"index": call.index, "function": {"arguments": text}})

    # ---- the text ----

    def _advance(self, final: bool) -> None:
        while True:
            if not self.in_call:
                j = self.text.find(MARK, self.pos)
                end = j if j >= 0 else len(self.text) if final else len(self.text) - _held(self.text, MARK)
                if not self.seen_call:
                    self.raw += self.text[self.pos : end]
                    visible = self.raw.strip()
                    self._content(visible[len(self.sent) :])
                self.pos = max(self.pos, end)
                if j < 0:
                    return
                self.seen_call = self.in_call = True
                self.body_at = self.pos = j + len(MARK)
                self._reset_call()
            k = self.text.find(END, self.body_at)
            complete = k >= 0 or final
            if not self.whole:
                self._call_body(self.text[self.body_at : k if k >= 0 else len(self.text)], complete)
            if not complete:
                return
            if self.announced is not None:
                self._close_args()
            elif not self.whole:
                self.whole = True  # never announced: this call and the later ones go whole
            self.in_call = False
            self.pos = k + len(END) if k >= 0 else len(self.text)
            if k < 0:
                return

    def _reset_call(self) -> None:
        self.announced: _Call | None = None
        self.cursor = 0  # where the body's next argument starts
        self.scanned = 0  # hermes: arguments text scanned
        self.depth, self.in_str, self.esc, self.args_done = 0, False, False, False
        self.arg: _Arg | None = None  # glm/xml: the argument being read
        self.n_args = 0

    def _announce(self, name: str) -> bool:
        if self.schemas is not None and name not in self.schemas:
            self.whole = True
            return False
        self.announced = _Call(len(self.calls), name)
        self.calls.append(self.announced)
        self._tool(self.announced.header())
        return True

    def _call_body(self, body: str, complete: bool) -> None:
        if self.fmt == "hermes":
            self._hermes(body, complete)
        else:
            self._tagged(body, complete)

    # ---- hermes: {"name": ..., "arguments": {...}} ----

    def _hermes(self, body: str, complete: bool) -> None:
        if self.announced is None:
            m = _HERMES_HEAD.match(body)
            if m is None or m.end() == len(body):  # the arguments' first character is not here yet
                return
            if body[m.end()] != "{":  # a JSON string of arguments, or worse: whole
                self.whole = True
                return
            try:
                name = json.loads(f'"{m.group(1)}"')
            except ValueError:
                self.whole = True
                return
            if not self._announce(name):
                return
            self.cursor = m.end()
        args = body[self.cursor :]
        start = self.scanned
        while self.scanned < len(args) and not self.args_done:
            ch = args[self.scanned]
            self.scanned += 1
            if self.in_str:
                if self.esc:
                    self.esc = False
                elif ch == "\\":
                    self.esc = True
                elif ch == '"':
                    self.in_str = False
            elif ch == '"':
                self.in_str = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
                self.args_done = self.depth == 0
        self._args(args[start : self.scanned])

    # ---- glm45 and qwen3_xml: one tag pair per argument ----

    def _tagged(self, body: str, complete: bool) -> None:
        glm = self.fmt == "glm45"
        if self.announced is None:
            if glm:
                i = body.find("<arg_key>")
                if i < 0 and not complete:
                    return
                name, at = (body if i < 0 else body[:i]).strip(), max(i, 0)
                if not name or any(c in name for c in '<>{}"\n'):
                    self.whole = True
                    return
            else:
                m = _XML_HEAD.match(body)
                if m is None:
                    if complete:
                        self.whole = True
                    return
                name, at = m.group(1).strip(), m.end()
            if not self._announce(name):
                return
            self.cursor = at
            self._args("{")
        assert self.announced is not None  # _announce() made it
        props = (self.schemas or {}).get(self.announced.name, {}).get("properties", {})
        close_tag = "</arg_value>" if glm else "</parameter>"
        while True:
            if self.arg is None:
                m = (_GLM_KEY if glm else _XML_KEY).match(body, self.cursor)
                if m is None:
                    return
                key = m.group(1).strip()
                prefix = (", " if self.n_args else "") + json.dumps(key, ensure_ascii=False) + ": "
                self.n_args += 1
                self.arg = arg = _Arg(m.end(), _is_string(props.get(key)), props.get(key), prefix)
                self.cursor = m.end()
                if arg.is_str:
                    self._args(prefix + '"')
            arg = self.arg
            if not glm and not arg.ready:  # <parameter=k>\n?value\n?</parameter>
                if arg.start == len(body) and not complete:
                    return
                arg.start += body.startswith("\n", arg.start)
                arg.ready = True
            close = body.find(close_tag, arg.start)
            value = body[arg.start : close if close >= 0 else len(body)]
            if close < 0:
                if arg.is_str:
                    hold = (
                        _held(value, close_tag) if glm else max(_held(value, close_tag), _held(value, "\n" + close_tag))
                    )
                    safe = len(value) - hold
                    if safe > arg.sent:
                        self._args(_escaped(value[arg.sent : safe]))
                        arg.sent = safe
                return
            if not glm and value.endswith("\n"):
                value = value[:-1]
            if arg.is_str:
                self._args(_escaped(value[arg.sent :]) + '"')
            else:
                self._args(arg.prefix + json.dumps(_value(value, arg.schema), ensure_ascii=False))
            self.cursor = close + len(close_tag)
            self.arg = None

    def _close_args(self) -> None:
        if self.fmt != "hermes":
            if self.arg is not None and self.arg.is_str:
                self._args('"')  # a string value cut short
            self._args("}")
