"""What the auto policy (pymtp.policy) knows of the head's acceptance: decayed counts per draft
position, and the estimates one generation hands the next on the same model (with the clock of
its probes)."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

#: Acceptance of a draft position before any evidence (and what an unseen position borrows).
PRIOR_RATE = 0.6


class Acceptance:
    """Acceptance per draft position: decayed (accepted, reached) counts. Position j's rate is
    (accepted_j + r_{j-1}) / (reached_j + 1): one pseudo-count at the rate of the position before
    (PRIOR_RATE before position 0), so an unseen position borrows its predecessor's rate."""

    # (plain lists: K is small and the policy runs every step)

    def __init__(self, n: int, window: int, prior: float = PRIOR_RATE) -> None:
        self.reached = [0.0] * n
        self.accepted = [0.0] * n
        self.prior = prior
        self._decay = 1.0 - 1.0 / window

    def rates(self, prior: float | None = None) -> list[float]:
        """(prior: position 0's pseudo-count rate instead of self.prior)"""
        out, prev = [], self.prior if prior is None else prior
        for a, r in zip(self.accepted, self.reached):
            prev = (a + prev) / (r + 1.0)
            out.append(prev)
        return out

    def discount(self, factor: float) -> None:
        """Make the evidence so far count `factor` times as much."""
        self.reached = [x * factor for x in self.reached]
        self.accepted = [x * factor for x in self.accepted]

    def update(self, n_drafted: int, n_accepted: int, weight: float = 1.0) -> None:
        checked = min(n_drafted, n_accepted + 1)  # tokens past the first rejection go unchecked
        self.count(checked, n_accepted, weight)

    def count(self, n_reached: int, n_passed: int, weight: float = 1.0) -> None:
        """The first n_reached positions were tried, the first n_passed of them passed (counted
        `weight` times)."""
        d = self._decay
        self.reached = [x * d + weight * (i < n_reached) for i, x in enumerate(self.reached)]
        self.accepted = [x * d + weight * (i < n_passed) for i, x in enumerate(self.accepted)]


@dataclass
class ProbeClock:
    """When the next probe is due while plain steps win: plain steps since the last draft and
    the gap the probes are at (carried from one generation to the next, like the acceptance:
    short generations would otherwise each probe at the first gap). share: the part of the probe
    budget the probes may spend (in a Batch it halves after each probe that did no better than
    expected: AutoPolicy.update). stretch_gap, stretch_run: the same for the drafts one token longer
    than the best (AutoPolicy.next_length; carried too: generations of 20 steps each restarting
    the clock drafted one token more at steps 8 and 16 of each, 2-3% of the time on echo-70).
    (stretch_gap 0: first_gap.)"""

    gap: float
    plain_run: int = 0
    share: float = 1.0
    stretch_gap: float = 0.0
    stretch_run: int = 0

    def __post_init__(self) -> None:
        self.stretch_gap = self.stretch_gap or self.gap


# model -> {key: (acceptance of kept tokens, of all tokens, keep rate, ProbeClock)}
_CARRIED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CARRIED_LOCK = threading.Lock()
#: A new generation starts from the last generation's estimates on the model, worth at most this
#: many windows of evidence (a new text shows itself within a few steps; halving them instead
#: shrank the evidence of many short generations to nothing, and each rejected probe then swung
#: the estimate by half).
CARRY = 0.5


def carried(model, key, window: int, first_gap: float) -> tuple[Acceptance, Acceptance, Acceptance, ProbeClock]:
    """A new policy's acceptance and keep-rate estimates and probe clock (first_gap: its first gap
    between probes): the last ones of this model and drafter (the evidence capped at CARRY
    windows), else the priors; the new policy's become the model's last."""
    n = key[1]
    acc, acc_all, keep = Acceptance(n, window), Acceptance(n, window), Acceptance(n, window, prior=1.0)
    clock = ProbeClock(first_gap)
    if model is None:
        return acc, acc_all, keep, clock
    with _CARRIED_LOCK:
        per_model = _CARRIED.setdefault(model, {})
        last = per_model.get(key)
        if last is not None:
            for new, old in zip((acc, acc_all, keep), last[:3]):
                most = max(old.reached, default=0.0)
                f = min(1.0, CARRY * window / most) if most > 0 else 1.0
                new.reached = [x * f for x in old.reached]
                new.accepted = [x * f for x in old.accepted]
            old = last[3]
            clock = ProbeClock(old.gap, old.plain_run, old.share, old.stretch_gap, old.stretch_run)
        per_model[key] = (acc, acc_all, keep, clock)
    return acc, acc_all, keep, clock
