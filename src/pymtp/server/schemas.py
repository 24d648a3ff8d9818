"""Request bodies of the OpenAI-compatible API (pydantic; unknown fields are ignored)."""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ChatCompletionRequest", "ChatMessage", "CommonRequest", "CompletionRequest"]


class CommonRequest(BaseModel):
    """Fields shared by completions and chat completions."""

    model_config = ConfigDict(extra="ignore")

    model: Optional[str] = None
    max_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    n: Optional[int] = Field(None, ge=1)
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


class ChatCompletionRequest(CommonRequest):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    tools: Optional[list[Any]] = None
    tool_choice: Optional[Any] = None
    response_format: Optional[dict[str, Any]] = None

    def token_limit(self) -> Optional[int]:
        return self.max_completion_tokens or self.max_tokens
