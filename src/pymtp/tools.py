"""pymtp.tools: tool calls in the model's own format, parsed into OpenAI ``tool_calls``, and
the grammar that forces one.

    fmt = tool_format(model.chat_template())          # "hermes", "glm45" or "qwen3_xml"
    reply = parse_tool_calls(text, fmt, tools)        # reply.content, reply.tool_calls
    c = Constraint(model, **forced_call(tools[0], fmt, model))   # tool_choice forcing a call

Formats:
* "hermes": Qwen2.5 / Qwen3 / Hermes, ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.
  Also the default model's: SmolLM2's ChatML template has no tool format, so pymtp.template
  describes the tools in a Hermes-style system message and the model answers in this format.
* "glm45": GLM-4.5 / 4.6 / 4.7, ``<tool_call>name\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n...</tool_call>``
  (string values raw, others as JSON).
* "qwen3_xml": Qwen3-Coder / Qwen3.5,
  ``<tool_call>\\n<function=name>\\n<parameter=k>\\nv\\n</parameter>\\n</function>\\n</tool_call>``.

A call that does not parse (bad JSON, no name, a tool that is not offered) stays in the
content as text; parsing never raises on model output.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FORMATS", "ParsedReply", "tool_format", "parse_tool_calls", "forced_call", "call_schema"]

FORMATS = ("hermes", "glm45", "qwen3_xml")

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)
_XML_FN = re.compile(r"^\s*<function=([^>\n]+)>(.*?)(?:</function>\s*)?$", re.S)
_XML_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)


def tool_format(template: str | None) -> str:
    """The tool-call format a chat template uses; "hermes" for a template with none (the
    default model's ChatML: pymtp.template then asks for Hermes-style calls)."""
    t = template or ""
    if "<arg_key>" in t:
        return "glm45"
    if "<function=" in t and "<parameter=" in t:
        return "qwen3_xml"
    return "hermes"


@dataclass
class ParsedReply:
    """A reply split into text content (None when there is none) and OpenAI tool calls."""

    content: str | None
    tool_calls: list[dict] = field(default_factory=list)

    def message(self) -> dict:
        """The OpenAI assistant message."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        return msg


def _tool_schemas(tools) -> dict[str, dict] | None:
    if tools is None:
        return None
    out = {}
    for t in tools:
        fn = t.get("function", t) if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out[fn["name"]] = fn.get("parameters") or {}
    return out


def _call(name: str, args: dict) -> dict:
    return {
        "id": "call_" + uuid.uuid4().hex[:24],
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


def _is_string(schema: dict | None) -> bool:
    """A parameter whose values are strings (written raw by GLM / Qwen3 XML templates)."""
    if not isinstance(schema, dict):
        return False
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return bool(values) and all(isinstance(x, str) for x in values)
    return schema.get("type") in ("string", ["string"])


def _value(raw: str, schema: dict | None) -> Any:
    """A raw argument value: text for a string parameter, else JSON when it parses."""
    if _is_string(schema):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _parse_hermes(body: str, schemas) -> tuple[str, dict] | None:
    try:
        obj = json.loads(body.strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    return (obj["name"], args) if isinstance(args, dict) else None


def _parse_glm(body: str, schemas) -> tuple[str, dict] | None:
    i = body.find("<arg_key>")
    name, rest = (body, "") if i < 0 else (body[:i], body[i:])
    name = name.strip()
    if not name or any(c in name for c in '<>{}"\n'):
        return None
    props = ((schemas or {}).get(name) or {}).get("properties", {})
    args = {}
    for k, v in _GLM_ARG.findall(rest):
        args[k.strip()] = _value(v, props.get(k.strip()))
    leftover = _GLM_ARG.sub("", rest).strip()
    return None if leftover else (name, args)


def _parse_xml(body: str, schemas) -> tuple[str, dict] | None:
    m = _XML_FN.match(body.strip())
    if not m:
        return None
    name = m.group(1).strip()
    props = ((schemas or {}).get(name) or {}).get("properties", {})
    args = {k.strip(): _value(v, props.get(k.strip())) for k, v in _XML_PARAM.findall(m.group(2))}
    leftover = _XML_PARAM.sub("", m.group(2)).strip()
    return None if leftover else (name, args)


_PARSERS = {"hermes": _parse_hermes, "glm45": _parse_glm, "qwen3_xml": _parse_xml}


def parse_tool_calls(text: str, fmt: str = "hermes", tools: list[dict] | None = None) -> ParsedReply:
    """Split generated text into content and OpenAI tool calls (id, type "function",
    function {name, arguments as a JSON string}).

    tools: the offered tools (OpenAI objects); with them, a call to another name stays text,
    and GLM / XML string parameters stay strings. An unterminated last call (cut by a stop
    string) is parsed if its body is complete. Leading ``<think>...</think>`` stays in content."""
    if fmt not in _PARSERS:
        raise ValueError(f"unknown tool-call format {fmt!r}: one of {', '.join(FORMATS)}")
    schemas = _tool_schemas(tools)
    parse = _PARSERS[fmt]
    calls, kept, pos = [], [], 0
    for m in _BLOCK.finditer(text):
        got = parse(m.group(1), schemas)
        if got is not None and (schemas is None or got[0] in schemas):
            kept.append(text[pos : m.start()])
            calls.append(_call(*got))
            pos = m.end()
    kept.append(text[pos:])
    content = "".join(kept).strip() if calls else text
    return ParsedReply(content if content else None, calls)


# ---- forcing a call ------------------------------------------------------------------------------


def _function(tool: dict) -> tuple[str, dict]:
    fn = tool.get("function", tool) if isinstance(tool, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ValueError(f"a tool must be an OpenAI function tool with a name, got {tool!r}")
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(params, dict):
        raise ValueError(f"tool {fn['name']!r}: parameters must be a JSON schema object")
    return fn["name"], params


def call_schema(tool: dict) -> dict:
    """The JSON schema of a Hermes call body: {"name": <the tool's name>, "arguments": <its parameters>}."""
    name, params = _function(tool)
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": params},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def _marker(text: str, model) -> str:
    """A Lark term for a marker: its special token when the model has it as one, else the text."""
    if model is not None:
        model = getattr(model, "model", model)
        ids = model.tokenize(text, add_special=False, parse_special=True)
        if len(ids) == 1 and not model.token_bytes(ids[0]):
            return f"<[{ids[0]}]>"
    return json.dumps(text)


def _json(schema: dict) -> str:
    return "%json " + json.dumps(schema)


def _value_rule(name: str, schema) -> str:
    """A raw parameter value: string enums / consts as their texts, other strings as text
    without "<" (their pattern or format is not enforced), anything else as JSON."""
    if _is_string(schema):
        if "enum" in schema or "const" in schema:
            return f"{name}: " + " | ".join(json.dumps(x) for x in schema.get("enum", [schema.get("const")]))
        return f"{name}: /[^<]*/"
    return f"{name}: {_json(schema if isinstance(schema, dict) else {})}"


def _glm_rule(name: str, params: dict, model, i: int) -> list[str]:
    props, required = params.get("properties") or {}, set(params.get("required") or [])
    ak, ake, av, ave = (_marker(t, model) for t in ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"))
    rules, parts = [], []
    for j, (k, s) in enumerate(props.items()):
        value = f"v{i}_{j}"
        rules.append(_value_rule(value, s))
        arg = f'{ak} {json.dumps(k)} {ake} "\\n" {av} {value} {ave} "\\n"'
        parts.append(f"({arg})" + ("" if k in required else "?"))
    body = " ".join(parts)
    rules.insert(0, f"call{i}: {json.dumps(name + chr(10))} {body}")
    return rules


def _xml_rule(name: str, params: dict, model, i: int) -> list[str]:
    props, required = params.get("properties") or {}, set(params.get("required") or [])
    rules, parts = [], []
    for j, (k, s) in enumerate(props.items()):
        value = f"v{i}_{j}"
        rules.append(_value_rule(value, s))
        # a string value's lexeme takes its own closing newline (a regex lexeme is greedy)
        nl = "" if _is_string(s) and "enum" not in s and "const" not in s else '"\\n" '
        arg = f'"<parameter={k}>\\n" {value} {nl}"</parameter>\\n"'
        parts.append(f"({arg})" + ("" if k in required else "?"))
    rules.insert(0, f'call{i}: "\\n<function={name}>\\n" {" ".join(parts)} "</function>\\n"')
    return rules


def forced_call(tools: dict | list[dict], fmt: str = "hermes", model=None) -> dict:
    """Keyword arguments for pymtp.grammar.Constraint that make the output exactly one call of
    a tool (tool_choice naming a function), or of any of several (tool_choice "required"),
    in the family's format: ``Constraint(model, **forced_call(tool, fmt, model))``.

    Hermes: the call's JSON body follows call_schema (name fixed, arguments validated against
    the tool's parameters). GLM-4.5 / Qwen3 XML: each parameter in order, required ones
    present, string values as raw text (enums as their texts; other strings: no "<"), others
    as JSON of their schema. model:
    to write the markers as the model's special tokens where it has them."""
    if fmt not in _PARSERS:
        raise ValueError(f"unknown tool-call format {fmt!r}: one of {', '.join(FORMATS)}")
    tools = [tools] if isinstance(tools, dict) else list(tools)
    if not tools:
        raise ValueError("forced_call needs at least one tool")
    fns = [_function(t) for t in tools]
    open_, close = _marker("<tool_call>", model), _marker("</tool_call>", model)
    rules = []
    for i, (name, params) in enumerate(fns):
        if fmt == "hermes":
            rules.append(f"call{i}: {_json(call_schema(tools[i]))}")
        elif fmt == "glm45":
            rules += _glm_rule(name, params, model, i)
        else:
            rules += _xml_rule(name, params, model, i)
    calls = " | ".join(f"call{i}" for i in range(len(fns)))
    if fmt == "hermes":
        start = f'start: {open_} "\\n" ({calls}) "\\n" {close}'
    else:
        start = f"start: {open_} ({calls}) {close}"
    return {"grammar": "\n".join([start, *rules]), "grammar_format": "lark"}
