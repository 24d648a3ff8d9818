"""TextOutput: one generation's text as speculative steps emit tokens.

Shared by generate()/stream() (one text) and batched generation (pymtp.batch, one per
sequence): end of generation (EOS, max_tokens, stop strings, a finished constraint, a full
context), UTF-8 decoding, holding back text that may start a stop string, and the
per-token log-probabilities."""

from __future__ import annotations

import codecs
import math
from typing import Protocol

from .config import GenerationConfig
from .stats import GenerationResult, SpecStats, StepResult


class Vocabulary(Protocol):
    """What a TextOutput asks of the model (a Session caches both answers; a Model works too)."""

    def piece(self, token: int) -> bytes: ...
    def is_eog(self, token: int) -> bool: ...


class TextOutput:
    """Feed it each StepResult (``take``); it says what text is safe to show and when the
    generation is finished (``finish``: "stop", "length" or "context"; None while running)."""

    def __init__(
        self,
        vocab: Vocabulary,
        limits: GenerationConfig,
        *,
        logprobs: bool = False,
        top_logprobs: int = 0,
        constraint=None,
    ) -> None:
        self.vocab = vocab
        self.limits = limits
        self.logprobs = logprobs or top_logprobs > 0
        self.top_logprobs = top_logprobs
        self.constraint = constraint
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._hold = max((len(s) for s in limits.stop), default=1) - 1
        self.text = ""  # all generated text so far
        self.sent = 0  # characters of text already handed out
        self.tokens: list[int] = []
        self.token_logprobs: list[float] = []
        self.token_tops: list[list[tuple[int, float]]] = []
        self.finish: str | None = None
        self._cut: int | None = None

    def remaining(self) -> int:
        return self.limits.max_tokens - len(self.tokens)

    def take(self, step: StepResult, room: int) -> str:
        """Account for one step's emitted tokens (room: positions left in the context after
        it); returns the text that became safe to show ("" for none)."""
        limits = self.limits
        for j, tok in enumerate(step.emitted):
            if not limits.ignore_eos and self.vocab.is_eog(tok):
                self.finish = "stop"
                break
            self.tokens.append(tok)
            if step.probs is not None:
                self.token_logprobs.append(math.log(step.probs[j]) if step.probs[j] > 0 else -math.inf)
            if step.top is not None:
                self.token_tops.append(step.top[j])
            self.text += self._decoder.decode(self.vocab.piece(tok))
            self._cut = _find_stop(self.text, limits.stop, self.sent) if limits.stop else None
            if self._cut is not None:
                self.text = self.text[: self._cut]
                self.finish = "stop"
                break
            if len(self.tokens) >= limits.max_tokens:
                self.finish = "length"
                break
        if self.finish is None and self.constraint is not None and self.constraint.is_terminated():
            self.finish = "stop"  # the constrained output is complete
        if self.finish is None and room < 1:
            self.finish = "context"
        return self.flush()

    def end(self, reason: str) -> str:
        """Finish for a reason found outside the steps (e.g. a full context before a step)."""
        self.finish = reason
        return self.flush()

    def flush(self) -> str:
        if self.finish is not None and self._cut is None:
            self.text += self._decoder.decode(b"", final=True)
            self._cut = len(self.text)  # decoded once
        safe = len(self.text) if self.finish is not None else max(self.sent, len(self.text) - self._hold)
        piece = self.text[self.sent : safe] if safe > self.sent else ""
        self.sent = max(self.sent, safe)
        return piece

    def entries(self, start: int) -> list[tuple[int, float, list | None]]:
        """(token, log p, its row's top alternatives or None) of the tokens from start on
        (with logprobs on)."""
        n = len(self.token_logprobs)
        tops = self.token_tops[start:n] if self.top_logprobs else [None] * (n - start)
        return list(zip(self.tokens[start:n], self.token_logprobs[start:n], tops))

    def result(self, prompt_tokens: list[int], stats: SpecStats) -> GenerationResult:
        assert self.finish is not None  # a result is made once the output finished
        return GenerationResult(
            self.text,
            self.tokens,
            prompt_tokens,
            self.finish,
            stats,
            self.token_logprobs if self.logprobs else None,
            self.token_tops if self.top_logprobs else None,
        )


def _find_stop(text: str, stops: tuple[str, ...], sent: int) -> int | None:
    """Index where the earliest stop string starts in the unsent tail, if any."""
    start = max(0, sent - max(len(s) for s in stops))
    hits = [i for i in (text.find(s, start) for s in stops) if i >= 0]
    return min(hits) if hits else None
