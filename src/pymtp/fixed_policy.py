"""The earlier draft policies, kept for research and benchmarks: SpecConfig(policy="fixed") and
SpecConfig(policy="adaptive") (pymtp.policy makes them; the auto policy, the default, lives there)."""

from __future__ import annotations

import numpy as np

from .config import SpecConfig

__all__ = ["DraftPolicy"]


class DraftPolicy:
    """SpecConfig(policy="fixed" or "adaptive"): how many tokens to draft next.

    Fixed: n_draft every step. Adaptive: the k in [n_min, n_draft] that maximizes expected
    tokens per second,

        (1 + sum_{i<k} prod_{j<=i} a_j) / (k * c_draft + c_verify(k)),

    with a_j the recent rate at which draft token j is accepted once the tokens before
    it were (counts decayed over ~adaptive_window steps; an untried position borrows
    the rate of the one before, so drafts can grow), c_draft the measured cost of one
    draft token and c_verify(k) a line fitted to measured verify times (a prior slope
    of 10% of a one-token verify per extra token until several k have been seen).
    Cooldown (both): after a step where nothing was accepted, draft `cooldown` fewer tokens
    for `cooldown_steps` steps (0 tokens = a plain decode step).
    """

    _PRIOR_RATE = 0.6
    _PRIOR_SLOPE = 0.1
    asked = 0  # (set by the speculator, read by AutoPolicy only)

    def __init__(self, config: SpecConfig, n_max: int) -> None:
        self.config = config
        self.n_max = max(1, min(config.n_draft, n_max))
        self.p_min = config.p_min
        self._decay = 1.0 - 1.0 / config.adaptive_window
        self._reached = np.zeros(self.n_max)  # steps where draft token i was checked
        self._accepted = np.zeros(self.n_max)  # ... and accepted
        self._c_draft = 0.0  # seconds per draft token (EMA)
        self._fit = np.zeros(5)  # decayed sums for c_verify: n, x, x^2, y, xy
        self._cool_left = 0
        self.cooldown_steps_taken = 0
        self.last_rates: list[float] = []
        self.trace: list = []  # (the auto policy records its choices here; these policies none)

    def verify_cost(self, k):
        """Seconds a verify of k draft tokens takes (the fitted line), None before any step."""
        return self._verify_cost(np.asarray(k, dtype=float)) if self._fit[0] > 0 else None

    def _verify_cost(self, k: np.ndarray) -> np.ndarray:
        n, sx, sxx, sy, sxy = self._fit
        mean_x, mean_y = sx / n, sy / n
        var = sxx / n - mean_x * mean_x
        slope = (
            (sxy / n - mean_x * mean_y) / var
            if var > 0.25
            else self._PRIOR_SLOPE * mean_y / (1 + self._PRIOR_SLOPE * mean_x)
        )
        base = mean_y - max(slope, 0.0) * mean_x
        return base + max(slope, 0.0) * k

    def next_length(self, n_past: int = 0, rows_before: int = 0, tokens_before: float = 0.0) -> int:
        c = self.config
        k = self.n_max
        if c.adaptive and self._fit[0] > 0:
            rates, prev = [], self._PRIOR_RATE
            for i in range(self.n_max):
                r = (self._accepted[i] + prev) / (self._reached[i] + 1.0)
                rates.append(r)
                prev = r
            self.last_rates = rates
            ks = np.arange(c.n_min, self.n_max + 1)
            gain = 1.0 + np.cumsum(np.cumprod(rates))[ks - 1]
            cost = ks * self._c_draft + self._verify_cost(ks)
            k = int(ks[int(np.argmax(gain / cost))])
        if self._cool_left > 0:
            self._cool_left -= 1
            self.cooldown_steps_taken += 1
            k = max(0, k - c.cooldown)
        return k

    def head_decodes(self, n_drafted: int) -> int:
        """Draft positions the head decoded this step, as these policies count them: the tokens
        drafted (the auto policy also counts the one its cut dropped)."""
        return n_drafted

    def update(
        self, n_drafted: int, n_accepted: int, t_draft: float = 0.0, t_verify: float = 0.0, confidence=None
    ) -> None:
        if n_drafted == 0:
            return
        if n_accepted == 0 and self.config.cooldown > 0:
            self._cool_left = self.config.cooldown_steps
        if not self.config.adaptive:
            return  # the estimates feed only the adaptive choice
        d = self._decay
        self._reached *= d
        self._accepted *= d
        checked = min(n_drafted, n_accepted + 1)  # tokens past the first rejection go unchecked
        self._reached[:checked] += 1
        self._accepted[:n_accepted] += 1
        if t_verify > 0:
            per_tok = t_draft / n_drafted
            self._c_draft = per_tok if self._c_draft == 0 else d * self._c_draft + (1 - d) * per_tok
            self._fit = d * self._fit + np.array(
                [1.0, n_drafted, n_drafted * n_drafted, t_verify, n_drafted * t_verify]
            )
