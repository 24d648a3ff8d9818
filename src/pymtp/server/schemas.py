"""Request bodies of the OpenAI-compatible API (pydantic; unknown fields are ignored), and parse_body.

The routes parse their bodies here rather than through FastAPI's body parameters, so
that any content type is read as JSON (``curl -d`` sends form-encoded) and a body that
is not JSON gets a 400 naming where it breaks (line, column and character offset).
"""

from __future__ import annotations

import json
from typing import Any, Literal, Optional, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import bad_request, validation_error

__all__ = ["ChatCompletionRequest", "ChatMessage", "CommonRequest", "CompletionRequest", "parse_body"]

#: The most choices one request may ask for (each choice is a generation of its own, run in turn).
MAX_N = 16

R = TypeVar("R", bound=BaseModel)
_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
               type(None): "null"}


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
        raise bad_request(f"the request body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno} "
                          f"(char {e.pos})", code="invalid_json") from None
    if not isinstance(obj, dict):
        kind = _JSON_TYPES.get(type(obj), type(obj).__name__)
        raise bad_request(f"the request body must be a JSON object, not {kind}")
    try:
        return cls.model_validate(obj)
    except ValidationError as e:
        raise validation_error(e.errors()) from None


class CommonRequest(BaseModel):
    """Fields shared by completions and chat completions."""

    model_config = ConfigDict(extra="ignore")

    model: Optional[str] = None
    max_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    n: Optional[int] = Field(None, ge=1, le=MAX_N)
    stream: Optional[bool] = False
    stream_options: Optional[dict[str, Any]] = None
    stop: Optional[Union[str, list[str]]] = None
    seed: Optional[int] = Field(None, ge=0)
    presence_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    logit_bias: Optional[dict[str, float]] = None
    logprobs: Optional[Union[bool, int]] = None
    top_logprobs: Optional[int] = None
    user: Optional[str] = None
    # pymtp / llama.cpp extensions
    top_k: Optional[int] = Field(None, ge=0)
    min_p: Optional[float] = Field(None, ge=0.0, lt=1.0)
    repetition_penalty: Optional[float] = Field(None, gt=0.0, le=10.0)
    ignore_eos: Optional[bool] = None
    speculative: Optional[bool] = None
    n_draft: Optional[int] = Field(None, ge=1, le=16)
    p_min: Optional[float] = Field(None, ge=0.0, le=1.0)
    policy: Optional[Literal["auto", "fixed", "adaptive"]] = None   # SpecConfig.policy

    def wants_usage(self) -> bool:
        """Whether a stream should end with a usage chunk (stream_options.include_usage)."""
        return bool((self.stream_options or {}).get("include_usage"))

    def token_limit(self) -> Optional[int]:
        """The most tokens the client asks for (None: the server's default)."""
        return self.max_tokens


class CompletionRequest(CommonRequest):
    prompt: Union[str, list[str], list[int], list[list[int]]]
    echo: Optional[bool] = False
    suffix: Optional[str] = None
    best_of: Optional[int] = Field(None, ge=1)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: Optional[Union[str, list[Any]]] = None
    tool_calls: Optional[list[Any]] = None       # an assistant turn's calls
    tool_call_id: Optional[str] = None           # a tool turn's answer to one
    name: Optional[str] = None


class ChatCompletionRequest(CommonRequest):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    tools: Optional[list[Any]] = None
    tool_choice: Optional[Any] = None
    response_format: Optional[dict[str, Any]] = None

    def token_limit(self) -> Optional[int]:
        return self.max_completion_tokens or self.max_tokens
