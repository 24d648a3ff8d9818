"""Choosing tokens, and the rules that accept or reject drafted tokens.

One transform turns a logits row into the distribution tokens are drawn from
(repetition penalty, temperature, top-k, top-p, min-p, in that order). Plain
sampling draws from it; speculative sampling compares the target's and the
head's distributions under that same transform, which is what makes it
lossless:

* greedy: accept the longest prefix where the target's argmax equals the
  draft, then emit the target's own token there (or the bonus token after a
  full accept);
* stochastic: accept draft d with probability min(1, p(d) / q(d)); on a
  rejection draw from normalize(max(0, p - q)); after a full accept draw the
  bonus token from p. The emitted tokens are then distributed exactly as
  plain sampling from p (Leviathan et al. 2023, Chen et al. 2023).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .config import SamplingConfig


class Sampler:
    """Token choice under one SamplingConfig, with its own seeded RNG."""

    def __init__(self, config: SamplingConfig) -> None:
        self.config = config
        self.rng = np.random.default_rng(config.seed)
        self.penalizes = config.repetition_penalty != 1.0 and config.repetition_window > 0

    # ---- the transform -------------------------------------------------------------

    def penalized(self, row: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """The row with recent tokens penalized (a float64 copy when penalized)."""
        if not self.penalizes or not history:
            return row
        x = np.array(row, dtype=np.float64)
        recent = np.unique(np.asarray(history[-self.config.repetition_window:], dtype=np.int64))
        vals = x[recent]
        pen = self.config.repetition_penalty
        x[recent] = np.where(vals > 0, vals / pen, vals * pen)
        return x

    def probs(self, row: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """The distribution a token is drawn from (float64, sums to 1)."""
        c = self.config
        x = np.array(self.penalized(row, history), dtype=np.float64)
        if c.greedy:
            p = np.zeros_like(x)
            p[int(np.argmax(x))] = 1.0
            return p
        x /= c.temperature
        n = x.shape[0]
        if 0 < c.top_k < n:
            drop = np.argpartition(x, n - c.top_k)[: n - c.top_k]
            x[drop] = -np.inf
        x -= x.max()
        p = np.exp(x)
        p /= p.sum()
        if c.top_p < 1.0:
            order = np.argsort(-p, kind="stable")
            cum = np.cumsum(p[order])
            keep = int(np.searchsorted(cum, c.top_p)) + 1   # smallest prefix reaching top_p
            p[order[keep:]] = 0.0
        if c.min_p > 0.0:
            p[p < c.min_p * p.max()] = 0.0
        p /= p.sum()
        return p

    def draw(self, p: np.ndarray) -> int:
        """One token from distribution p."""
        cum = np.cumsum(p)
        return int(min(np.searchsorted(cum, self.rng.random() * cum[-1], side="right"), len(p) - 1))

    def choose(self, row: np.ndarray, history: Sequence[int]) -> int:
        """The next token from one logits row (plain decoding)."""
        if self.config.greedy:
            return int(np.argmax(self.penalized(row, history)))
        return self.draw(self.probs(row, history))

    # ---- verification -------------------------------------------------------------------

    def verify(
        self,
        target_rows: np.ndarray,
        draft: Sequence[int],
        draft_probs: Sequence[np.ndarray] | None,
        history: list[int],
    ) -> tuple[int, int]:
        """Accept a prefix of draft against the target rows of one verify batch.

        target_rows[i] is the target's logits after history + draft[:i]
        (k + 1 rows for k drafted tokens). draft_probs[i] is the head's
        distribution draft[i] was drawn from (stochastic mode only).
        Returns (number of draft tokens accepted, the token emitted after them).
        """
        k = len(draft)
        if self.config.greedy:
            if self.penalizes:
                targets = [int(np.argmax(self.penalized(target_rows[i], history + list(draft[:i]))))
                           for i in range(k + 1)]
            else:
                targets = np.argmax(target_rows[: k + 1], axis=1).tolist()
            n = 0
            while n < k and targets[n] == draft[n]:
                n += 1
            return n, int(targets[n])
        for i in range(k):
            p = self.probs(target_rows[i], history + list(draft[:i]))
            q = draft_probs[i]  # type: ignore[index]  # drafted tokens always come with their q
            d = draft[i]
            if self.rng.random() * q[d] < p[d]:        # accept with probability min(1, p/q)
                continue
            residual = np.maximum(p - q, 0.0)
            total = residual.sum()
            # total == 0 only when p == q, where a rejection has probability 0.
            return i, self.draw(residual / total if total > 0 else p)
        return k, self.draw(self.probs(target_rows[k], history + list(draft)))
