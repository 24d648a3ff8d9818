"""Request bodies of the OpenAI-compatible API (pydantic; unknown fields are ignored), and parse_body.

The generation settings are derived from pymtp.config's models (SettingsFields): the same
names, bounds and descriptions as the Python API's keywords, every one of them optional.

The routes parse their bodies here rather than through FastAPI's body parameters, so
that any content type is read as JSON (``curl -d`` sends form-encoded) and a body that
is not JSON gets a 400 naming where it breaks (line, column and character offset).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Optional, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ..config import GenerationConfig, SamplingConfig, SpecConfig
from .errors import bad_request, validation_error

__all__ = ["ChatCompletionRequest", "ChatMessage", "CommonRequest", "CompletionRequest", "SETTINGS", "parse_body"]

#: The request fields that are settings (the flat form of pymtp.request.flat_options).
SETTINGS = (*SamplingConfig.model_fields, *SpecConfig.model_fields, *GenerationConfig.model_fields, "speculative")

#: The most choices one request may ask for (each choice is a generation of its own, run in turn).
MAX_N = 16

R = TypeVar("R", bound=BaseModel)
_JSON_TYPES = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def parse_body(raw: bytes, cls: type[R]) -> R:
    """The request body raw as a cls; a 400 (APIError) when it is empty, not JSON, or invalid."""
    if not raw.strip():
        raise bad_request("the request body is empty: send a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad_request(f"the request body is not UTF-8: byte {e.start} (0x{raw[e.start]:02x})") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise bad_request(
            f"the request body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno} (char {e.pos})",
            code="invalid_json",
        ) from None
    if not isinstance(obj, dict):
        kind = _JSON_TYPES.get(type(obj), type(obj).__name__)
        raise bad_request(f"the request body must be a JSON object, not {kind}")
    try:
        return cls.model_validate(obj)
    except ValidationError as e:
        raise validation_error(e.errors()) from None


def _optional(*models: type[BaseModel], wire: tuple[str, ...]) -> dict[str, Any]:
    """The fields of the settings models as optional request fields (None: the server's default)
    with the same bounds and descriptions; wire: fields the OpenAI API sends in a form of its own."""
    fields: dict[str, Any] = {}
    for model in models:
        for name, info in model.model_fields.items():
            if name not in wire:
                args = (info.annotation, *info.metadata)  # Annotated[T, *metadata], built at run time
                kind = Annotated[args] if info.metadata else info.annotation  # type: ignore[valid-type]
                # Optional[]: kind is a type form made at run time
                fields[name] = (Optional[kind], Field(None, description=info.description))  # noqa: UP045
    return fields


#: Every field of SamplingConfig, SpecConfig and GenerationConfig (pymtp.config) as an optional
#: request field, so bounds cannot disagree with the Python API's; the wire forms below differ.
SettingsFields = create_model(
    "SettingsFields",
    __config__=ConfigDict(extra="ignore"),
    **_optional(SamplingConfig, SpecConfig, GenerationConfig, wire=("logit_bias", "stop")),
)


class CommonRequest(SettingsFields):
    """Fields shared by completions and chat completions: the settings models' fields (SettingsFields,
    with pymtp's extensions to OpenAI's: top_k, min_p, repetition_penalty, repetition_window,
    ignore_eos, and SpecConfig's n_draft, p_min, drafter, ...) and the OpenAI request fields."""

    model_config = ConfigDict(extra="ignore")

    if TYPE_CHECKING:  # SettingsFields' fields are made at run time; the ones read here by name
        max_tokens: int | None

    model: str | None = None
    n: int | None = Field(None, ge=1, le=MAX_N)
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    logit_bias: dict[str, float] | None = None  # {"token id": bias}
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    user: str | None = None
    speculative: bool | None = None  # false: plain decoding

    def wants_usage(self) -> bool:
        """Whether a stream should end with a usage chunk (stream_options.include_usage)."""
        return bool((self.stream_options or {}).get("include_usage"))

    def token_limit(self) -> int | None:
        """The most tokens the client asks for (None: the server's default)."""
        return self.max_tokens

    def settings(self) -> dict[str, Any]:
        """The settings the request gives, in the flat form (pymtp.request.flat_options): the
        settings models' fields and speculative; the token limit; logprobs are read apart."""
        given = {name: getattr(self, name) for name in SETTINGS if getattr(self, name) is not None}
        if self.token_limit() is not None:
            given["max_tokens"] = self.token_limit()
        return given


class CompletionRequest(CommonRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | list[Any] | None = None
    tool_calls: list[Any] | None = None  # an assistant turn's calls
    tool_call_id: str | None = None  # a tool turn's answer to one
    name: str | None = None


class ChatCompletionRequest(CommonRequest):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: list[Any] | None = None
    tool_choice: Any | None = None
    response_format: dict[str, Any] | None = None

    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens
