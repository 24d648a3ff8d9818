"""Response bodies: the whole response, or its server-sent-event chunks, for completions and chat.

A Reply words one request's answer; CompletionReply and ChatReply differ only in
how a choice carries its text (``text`` vs ``message`` / ``delta``) and in the
chat stream's opening role chunk.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, AsyncIterator

from fastapi.responses import StreamingResponse

from ..display import stats_dict
from ..stats import GenerationResult
from .errors import from_exception

__all__ = ["ChatReply", "CompletionReply", "Reply", "finish_reason", "spec_summary", "usage"]

_FINISH = {"stop": "stop", "length": "length", "context": "length"}
_SUMMARY = ("acceptance_rate", "mean_accepted", "tokens_per_second", "acceptance_by_position", "tokens_per_step",
            "n_steps", "n_drafted", "n_accepted", "t_prefill", "t_total")


def spec_summary(result: GenerationResult, speculative: bool) -> dict[str, Any]:
    """The ``pymtp`` extension object of a response."""
    stats = stats_dict(result.stats)
    return {"speculative": speculative, **{k: stats[k] for k in _SUMMARY}, "finish_reason": result.finish_reason}


def usage(result: GenerationResult) -> dict[str, int]:
    p, c = len(result.prompt_tokens), len(result.tokens)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def finish_reason(result: GenerationResult) -> str:
    """OpenAI's finish reason: a full context is "length"."""
    return _FINISH.get(result.finish_reason, "stop")


class Reply:
    """One request's response; the subclasses say how a choice carries text."""

    prefix = object = chunk_object = ""

    def __init__(self, model_id: str, speculative: bool) -> None:
        self.id = f"{self.prefix}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model_id, self.speculative = model_id, speculative

    # ---- what differs between the endpoints ----

    def choice(self, text: str, finish: str | None) -> dict[str, Any]:
        """The choice of the whole response."""
        raise NotImplementedError

    def chunk_choice(self, text: str | None, finish: str | None) -> dict[str, Any]:
        """The choice of a stream chunk (text None: the closing chunk)."""
        raise NotImplementedError

    def opening(self) -> list[dict[str, Any]]:
        """Chunks sent before the first piece of text."""
        return []

    # ---- the same for both ----

    def envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_id, "choices": choices}

    def body(self, result: GenerationResult) -> dict[str, Any]:
        """The whole (non-streamed) response."""
        out = self.envelope(self.object, [self.choice(result.text, finish_reason(result))])
        out["usage"] = usage(result)
        out["pymtp"] = spec_summary(result, self.speculative)
        return out

    def chunk(self, text: str | None, finish: str | None = None) -> dict[str, Any]:
        return self.envelope(self.chunk_object, [self.chunk_choice(text, finish)])

    def closing(self, result: GenerationResult, include_usage: bool) -> list[dict[str, Any]]:
        """The last chunk (finish reason and stats), then the usage chunk if asked for."""
        last = self.chunk(None, finish_reason(result))
        last["pymtp"] = spec_summary(result, self.speculative)
        out = [last]
        if include_usage:
            u = self.envelope(self.chunk_object, [])
            u["usage"] = usage(result)
            out.append(u)
        return out

    def streaming(self, first: tuple[str, object], items: AsyncIterator[tuple[str, object]],
                  include_usage: bool) -> StreamingResponse:
        """Server-sent events from the runner's items (first already taken); closes items at the end."""

        async def events():
            item = first
            try:
                for c in self.opening():
                    yield sse(c)
                while True:
                    kind, value = item
                    if kind == "piece":
                        if value:
                            yield sse(self.chunk(value))
                    elif kind == "done":
                        for c in self.closing(value, include_usage):
                            yield sse(c)
                        break
                    else:  # an error after the stream started: reported in-band
                        yield sse(from_exception(value).body())
                        break
                    item = await items.__anext__()
                yield "data: [DONE]\n\n"
            finally:
                await items.aclose()

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


class CompletionReply(Reply):
    """A text completion's response (``/v1/completions``)."""

    prefix, object, chunk_object = "cmpl", "text_completion", "text_completion"

    def choice(self, text: str, finish: str | None) -> dict[str, Any]:
        return {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}

    def chunk_choice(self, text: str | None, finish: str | None) -> dict[str, Any]:
        return self.choice(text or "", finish)


class ChatReply(Reply):
    """A chat completion's response (``/v1/chat/completions``)."""

    prefix, object, chunk_object = "chatcmpl", "chat.completion", "chat.completion.chunk"

    def choice(self, text: str, finish: str | None) -> dict[str, Any]:
        return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                "finish_reason": finish}

    def chunk_choice(self, text: str | None, finish: str | None) -> dict[str, Any]:
        delta = {"content": text} if text is not None else {}
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def opening(self) -> list[dict[str, Any]]:
        role = self.chunk("")
        role["choices"][0]["delta"] = {"role": "assistant", "content": ""}
        return [role]


def sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"
