"""Response bodies: the whole response, or its server-sent-event chunks, for completions and chat.

A Reply words one request's answer; CompletionReply and ChatReply differ only in
how a choice carries its text (``text`` vs ``message`` / ``delta``) and in the
chat stream's opening role chunk.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from fastapi.responses import StreamingResponse

from ..display import stats_dict
from ..stats import GenerationResult, SpecStats
from .errors import from_exception
from .tickets import Ticket
from .toolstream import ToolCallStream

__all__ = ["ChatReply", "CompletionReply", "Reply", "finish_reason", "merged_stats", "spec_summary", "summary", "usage"]

_FINISH = {"stop": "stop", "length": "length", "context": "length", "timeout": "length"}
_SUMMARY = (
    "acceptance_rate",
    "mean_accepted",
    "tokens_per_second",
    "acceptance_by_position",
    "tokens_per_step",
    "n_steps",
    "n_drafted",
    "n_accepted",
    "t_prefill",
    "t_total",
)


def spec_summary(result: GenerationResult, speculative: bool) -> dict[str, Any]:
    """The ``pymtp`` extension object of a response (of one choice)."""
    stats = stats_dict(result.stats)
    return {
        "speculative": speculative,
        **{k: stats[k] for k in _SUMMARY},
        "finish_reason": result.finish_reason,
        "n_reused": result.stats.n_reused,
        "reused_saved": result.stats.reused_saved,
    }


def merged_stats(results: list[GenerationResult]) -> SpecStats:
    """The counters and times of several generations added up."""
    total = SpecStats()
    for r in results:
        s = r.stats
        for name in (
            "n_steps",
            "n_drafted",
            "n_accepted",
            "n_emitted",
            "n_prompt",
            "t_prefill",
            "t_draft",
            "t_verify",
            "t_total",
            "cooldown_steps",
        ):
            setattr(total, name, getattr(total, name) + getattr(s, name))
        for mine, theirs in ((total.drafted_at, s.drafted_at), (total.accepted_at, s.accepted_at)):
            mine.extend([0] * (len(theirs) - len(mine)))
            for i, n in enumerate(theirs):
                mine[i] += n
    return total


def summary(results: list[GenerationResult], speculative: bool) -> dict[str, Any]:
    """The ``pymtp`` object of a whole response: its one choice's, or for n > 1 the stats of all
    choices added up (without a finish reason) and each choice's in ``choices``."""
    if len(results) == 1:
        return spec_summary(results[0], speculative)
    stats = stats_dict(merged_stats(results))
    return {
        "speculative": speculative,
        **{k: stats[k] for k in _SUMMARY},
        "choices": [spec_summary(r, speculative) for r in results],
    }


def usage(results: list[GenerationResult]) -> dict[str, Any]:
    """OpenAI's usage: the prompt once, the completion tokens of every choice; the prompt
    tokens taken from a cache as prompt_tokens_details.cached_tokens."""
    p, c = len(results[0].prompt_tokens), sum(len(r.tokens) for r in results)
    return {
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": p + c,
        "prompt_tokens_details": {"cached_tokens": results[0].stats.n_reused},
    }


def finish_reason(result: GenerationResult) -> str:
    """OpenAI's finish reason: a full context, and the request's deadline, are "length"."""
    return _FINISH.get(result.finish_reason, "stop")


class Reply:
    """One request's response; the subclasses say how a choice carries text."""

    prefix = object = chunk_object = ""

    def __init__(self, model_id: str, speculative: bool, piece=None) -> None:
        self.id = f"{self.prefix}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model_id, self.speculative = model_id, speculative
        self.piece = piece  # token -> bytes, for logprobs
        self._sent_logprobs: dict[int, int] = {}  # streaming: tokens each choice's chunks carried

    # ---- what differs between the endpoints ----

    def choice(self, index: int, text: str, finish: str | None) -> dict[str, Any]:
        """A choice of the whole response."""
        raise NotImplementedError

    def chunk_choice(self, index: int, text: str | None, finish: str | None) -> dict[str, Any]:
        """The choice of a stream chunk (text None: the closing chunk)."""
        raise NotImplementedError

    def opening(self, index: int) -> list[dict[str, Any]]:
        """Chunks sent before choice index's first piece of text."""
        return []

    def logprobs(self, result: GenerationResult) -> dict[str, Any]:
        """The logprobs object of a choice."""
        return self.token_logprobs(result.tokens, result.logprobs or [], result.top_logprobs)

    def token_logprobs(self, tokens: list[int], logprobs: list[float], tops: list | None) -> dict[str, Any]:
        """The logprobs object of these tokens (a whole choice, or a stream chunk's); tops: each
        one's likeliest (token, logprob) pairs, or None."""
        raise NotImplementedError

    def piece_chunks(self, index: int, text: str) -> list[dict[str, Any]]:
        """The chunks of a piece of choice index's text."""
        return [self.chunk(index, text)] if text else []

    def done_chunks(self, index: int, result: GenerationResult) -> list[dict[str, Any]]:
        """Chunks sent once choice index is done, before its closing chunk (text held until then)."""
        return []

    # ---- the same for both ----

    def envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_id, "choices": choices}

    def body(self, results: list[GenerationResult]) -> dict[str, Any]:
        """The whole (non-streamed) response: one choice per result."""
        choices = [self.choice(i, r.text, self.finish(r)) for i, r in enumerate(results)]
        for c, r in zip(choices, results):
            if r.logprobs is not None:
                c["logprobs"] = self.logprobs(r)
        out = self.envelope(self.object, choices)
        out["usage"] = usage(results)
        out["pymtp"] = summary(results, self.speculative)
        return out

    def chunk(self, index: int, text: str | None, finish: str | None = None, logprobs=None) -> dict[str, Any]:
        """A stream chunk; logprobs: [(token, logprob, tops or None), ...] of the tokens it carries."""
        out = self.envelope(self.chunk_object, [self.chunk_choice(index, text, finish)])
        if logprobs:
            tokens, lps, tops = zip(*logprobs)
            out["choices"][0]["logprobs"] = self.token_logprobs(
                list(tokens), list(lps), None if tops[0] is None else list(tops)
            )
            self._sent_logprobs[index] = self._sent_logprobs.get(index, 0) + len(tokens)
        return out

    def finish(self, result: GenerationResult) -> str:
        return finish_reason(result)

    def closing(self, index: int, result: GenerationResult) -> dict[str, Any]:
        """Choice index's last chunk: its finish reason and stats."""
        last = self.chunk(index, None, self.finish(result))
        last["pymtp"] = spec_summary(result, self.speculative)
        return last

    def streaming(
        self, ticket: Ticket, first: tuple[int, str, Any] | None, include_usage: bool, on_error=None
    ) -> StreamingResponse:
        """Server-sent events from the ticket's (choice index, kind, value) events (first already
        taken). Each choice's chunks carry its index. An error after the stream started is
        reported in-band and passed to on_error (the APIError). However the stream ends (the
        client closing it included), the ticket is cancelled: a plain flag, no await, so it holds
        in a task being cancelled."""

        async def events():
            item, results, opened, failed = first, [], set(), False
            pending: dict[int, list] = {}  # logprobs not sent yet, by choice
            try:
                while item is not None:
                    index, kind, value = item
                    if index not in opened:
                        opened.add(index)
                        for c in self.opening(index):
                            yield sse(c)
                    if kind == "logprobs":
                        pending.setdefault(index, []).extend(value)
                    elif kind == "piece":
                        for c in self._with_logprobs(self.piece_chunks(index, value), index, pending):
                            yield sse(c)
                    elif kind == "done":
                        results.append(value)
                        for c in self._with_logprobs(self.done_chunks(index, value), index, pending):
                            yield sse(c)
                        pending.pop(index, None)
                        if value.logprobs is not None:
                            # tokens after the last piece (a stop string's, an end token's)
                            sent = self._sent_logprobs.get(index, 0)
                            tops = value.top_logprobs[sent:] if value.top_logprobs else [None] * len(value.tokens)
                            rest = list(zip(value.tokens[sent:], value.logprobs[sent:], tops))
                            if rest:
                                yield sse(self.chunk(index, "", logprobs=rest))
                        yield sse(self.closing(index, value))
                    else:  # an error after the stream started: reported in-band
                        err = from_exception(value)
                        if on_error is not None:
                            on_error(err)
                        yield sse(err.body())
                        failed = True
                        break
                    item = await ticket.next()
                if include_usage and results and not failed:
                    u = self.envelope(self.chunk_object, [])
                    u["usage"] = usage(results)
                    yield sse(u)
                yield "data: [DONE]\n\n"
            finally:
                ticket.cancel()

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    def _with_logprobs(self, chunks: list[dict[str, Any]], index: int, pending: dict[int, list]):
        """chunks, the first carrying the logprobs that wait for choice index (they wait on when
        there is no chunk)."""
        if chunks and pending.get(index):
            lps = pending.pop(index)
            tokens, values, tops = zip(*lps)
            chunks[0]["choices"][0]["logprobs"] = self.token_logprobs(
                list(tokens), list(values), None if tops[0] is None else list(tops)
            )
            self._sent_logprobs[index] = self._sent_logprobs.get(index, 0) + len(tokens)
        return chunks


class CompletionReply(Reply):
    """A text completion's response (``/v1/completions``)."""

    prefix, object, chunk_object = "cmpl", "text_completion", "text_completion"

    def choice(self, index: int, text: str, finish: str | None) -> dict[str, Any]:
        return {"text": text, "index": index, "logprobs": None, "finish_reason": finish}

    def chunk_choice(self, index: int, text: str | None, finish: str | None) -> dict[str, Any]:
        return self.choice(index, text or "", finish)

    def token_logprobs(self, tokens: list[int], logprobs: list[float], tops: list | None) -> dict[str, Any]:
        texts = [self.piece(t).decode("utf-8", "replace") for t in tokens]
        offsets = [sum(len(t) for t in texts[:i]) for i in range(len(texts))]
        # (tokens whose text is the same share a key: the likeliest one's value is kept)
        top = (
            None
            if tops is None
            else [{self.piece(t).decode("utf-8", "replace"): v for t, v in reversed(row)} for row in tops]
        )
        return {"tokens": texts, "token_logprobs": logprobs, "top_logprobs": top, "text_offset": offsets}


class ChatReply(Reply):
    """A chat completion's response (``/v1/chat/completions``). With tools, the reply text is
    parsed for tool calls (pymtp.tools, the template's format): they become the message's
    ``tool_calls`` and finish_reason "tool_calls". Streamed, text before a call goes out as
    content and each call's arguments as they are generated (server.toolstream)."""

    prefix, object, chunk_object = "chatcmpl", "chat.completion", "chat.completion.chunk"

    def __init__(
        self, model_id: str, speculative: bool, tools: tuple[list[dict], str] | None = None, piece=None
    ) -> None:
        super().__init__(model_id, speculative, piece)
        self.tools = tools
        self._streams: dict[int, ToolCallStream] = {}

    def _parsed(self, text: str):
        from ..tools import parse_tool_calls

        assert self.tools is not None  # a tool reply is made for a request with tools
        return parse_tool_calls(text, self.tools[1], self.tools[0])

    def finish(self, result: GenerationResult) -> str:
        if self.tools is not None and self._parsed(result.text).tool_calls:
            return "tool_calls"
        return finish_reason(result)

    def choice(self, index: int, text: str, finish: str | None) -> dict[str, Any]:
        message = self._parsed(text).message() if self.tools is not None else {"role": "assistant", "content": text}
        return {"index": index, "message": message, "logprobs": None, "finish_reason": finish}

    def token_logprobs(self, tokens: list[int], logprobs: list[float], tops: list | None) -> dict[str, Any]:
        def entry(token: int, lp: float) -> dict[str, Any]:
            p = self.piece(token)
            return {"token": p.decode("utf-8", "replace"), "logprob": lp, "bytes": list(p)}

        content = [
            {**entry(t, lp), "top_logprobs": [entry(a, v) for a, v in (tops[i] if tops else [])]}
            for i, (t, lp) in enumerate(zip(tokens, logprobs))
        ]
        return {"content": content, "refusal": None}

    def _stream(self, index: int) -> ToolCallStream:
        if index not in self._streams:
            assert self.tools is not None
            self._streams[index] = ToolCallStream(self.tools[1], self.tools[0])
        return self._streams[index]

    def _delta_chunk(self, index: int, delta: dict[str, Any]) -> dict[str, Any]:
        return self.envelope(
            self.chunk_object, [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None}]
        )

    def piece_chunks(self, index: int, text: str) -> list[dict[str, Any]]:
        if self.tools is None:
            return super().piece_chunks(index, text)
        return [self._delta_chunk(index, d) for d in self._stream(index).feed(text)]

    def done_chunks(self, index: int, result: GenerationResult) -> list[dict[str, Any]]:
        if self.tools is None:
            return []
        return [self._delta_chunk(index, d) for d in self._stream(index).finish()]

    def chunk_choice(self, index: int, text: str | None, finish: str | None) -> dict[str, Any]:
        delta = {"content": text} if text is not None else {}
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}

    def opening(self, index: int) -> list[dict[str, Any]]:
        role = self.chunk(index, "")
        role["choices"][0]["delta"] = {"role": "assistant", "content": ""}
        return [role]


def sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"
