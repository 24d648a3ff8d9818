"""Prompt lookup: draft by copying what followed the latest earlier occurrence of the last
few tokens, in the prompt or the generated text. Costs no model call; wins where the output
repeats its context (a file rewritten with small edits, a quoted passage, repeated JSON).

In sampling mode each draft token's q is a point mass. Rejection sampling stays exact with
it: d is accepted with probability p(d), and a rejection draws from p with d removed.
"""

from __future__ import annotations

from .config import SpecConfig
from .drafter import Draft, Drafter
from .sampling import Q_POINT_MASS, Sampler


class PromptLookupDrafter(Drafter):
    """ngram: the longest suffix of the text it matches (shorter ones are tried down to
    min_ngram); max_draft: the most tokens it copies per step."""

    last_source = "lookup"

    def __init__(self, n_vocab: int, ngram: int = 3, min_ngram: int = 1, max_draft: int = 16) -> None:
        if not 1 <= min_ngram <= ngram:
            raise ValueError(f"need 1 <= min_ngram <= ngram, got {min_ngram}, {ngram}")
        self.n_vocab = n_vocab
        self.ngram, self.min_ngram = ngram, min_ngram
        self.max_draft = max_draft

    def configure(self, spec: SpecConfig) -> None:
        self.ngram = max(spec.ngram, self.min_ngram)

    def continuation(self, history: list[int], k: int) -> list[int]:
        """Up to k tokens that followed the latest earlier occurrence of history's last n
        tokens (the longest n from ngram down to min_ngram that occurs)."""
        for n in range(min(self.ngram, len(history) - 1), self.min_ngram - 1, -1):
            tail = history[-n:]
            for start in range(len(history) - n - 1, -1, -1):
                if history[start : start + n] == tail:
                    return history[start + n : start + n + k]
        return []

    def propose(
        self, last_token: int, n_past: int, k: int, sampler: Sampler, history: list[int], p_min: float = 0.0
    ) -> Draft:
        tokens = self.continuation(history, k)
        return Draft(
            tokens=list(tokens),
            confidence=[1.0] * len(tokens),
            q=None if sampler is None or sampler.config.greedy else Q_POINT_MASS,
        )
