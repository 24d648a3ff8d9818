"""What the auto policy (pymtp.policy) knows of how drafts fare, per model and drafter.

* Acceptance: the chance that a drafted token at draft position j is accepted once the tokens
  before it were (decayed counts with a prior), and the chance that the drafter drafts position
  j when asked to (the confidence cut, or a drafter with nothing more, ends drafts early: a
  head whose tokens the cut drops yields nothing, whatever their acceptance).
* ConfidenceMap: the chance that a drafted token is accepted given the head's probability of
  it, learned per band of that probability. The confidence cut keeps a token when that chance
  pays for its verify row; a head whose probabilities are too low (or too high) gets a cut that
  says so. A band with little evidence falls back to the overall acceptance (optimism: the cut
  starts permissive, so the bands below it are seen before it rises).
* ProbeClock: when the next probe is due while plain steps win.

A new generation starts from the last one's estimates on the same model and drafter (carried).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

#: Acceptance of a draft position before any evidence (and what an unseen position borrows).
PRIOR_RATE = 0.6
#: Plain steps before the first probe while k = 0 wins.
PROBE_FIRST = 8
#: A new generation starts from the last generation's estimates on the model, worth at most this
#: many windows of evidence (a new text shows itself within a few steps; halving them instead
#: shrank the evidence of many short generations to nothing, and each rejected probe then swung
#: the estimate by half).
CARRY = 0.5
#: Bands of the head's probability (equal widths over 0..1), and the pseudo-counts of the prior
#: (the overall acceptance) in each.
BANDS, BAND_PRIOR = 10, 2.0
#: The confidence map's evidence spans this many acceptance windows (of steps) in drafted tokens:
#: a band needs a few dozen tokens to tell its rate from its neighbours'.
CONFIDENCE_WINDOW = 16


class Acceptance:
    """Acceptance per draft position: decayed (accepted, reached) counts. Position j's rate is
    (accepted_j + r_{j-1}) / (reached_j + 1): one pseudo-count at the rate of the position before
    (PRIOR_RATE before position 0), so an unseen position borrows its predecessor's rate."""

    # (plain lists: K is small and the policy runs every step)

    def __init__(self, n: int, window: int) -> None:
        self.reached = [0.0] * n
        self.accepted = [0.0] * n
        self.tried = [0.0] * n  # positions the drafter was asked for and tried ...
        self.drafted = [0.0] * n  # ... and drafted
        self._decay = 1.0 - 1.0 / window

    def rates(self) -> list[float]:
        out, prev = [], PRIOR_RATE
        for a, r in zip(self.accepted, self.reached):
            prev = (a + prev) / (r + 1.0)
            out.append(prev)
        return out

    def drafting(self) -> list[float]:
        """The chance that position j is drafted when asked for (one pseudo-count at 1)."""
        return [(d + 1.0) / (t + 1.0) for d, t in zip(self.drafted, self.tried)]

    def discount(self, factor: float) -> None:
        """Make the evidence so far count `factor` times as much."""
        self.reached = [x * factor for x in self.reached]
        self.accepted = [x * factor for x in self.accepted]

    def update(self, n_drafted: int, n_accepted: int) -> None:
        """A draft of n_drafted tokens of which the first n_accepted were accepted."""
        if n_drafted:
            d = self._decay
            checked = min(n_drafted, n_accepted + 1)  # tokens past the first rejection go unchecked
            self.reached = [x * d + (i < checked) for i, x in enumerate(self.reached)]
            self.accepted = [x * d + (i < n_accepted) for i, x in enumerate(self.accepted)]

    def update_drafting(self, n_asked: int, n_drafted: int) -> None:
        """The drafter, asked for n_asked tokens, drafted n_drafted (it stops at the first token
        it does not draft)."""
        if n_asked > 0:
            d, tried = self._decay, min(n_asked, n_drafted + 1)
            self.tried = [x * d + (i < tried) for i, x in enumerate(self.tried)]
            self.drafted = [x * d + (i < n_drafted) for i, x in enumerate(self.drafted)]


class ConfidenceMap:
    """Decayed (accepted, checked) counts of drafted tokens per band of the head's probability."""

    def __init__(self, window: int) -> None:
        self.checked = [0.0] * BANDS
        self.accepted = [0.0] * BANDS
        self._decay = 1.0 - 1.0 / window

    @staticmethod
    def band(p: float) -> int:
        return min(BANDS - 1, max(0, int(p * BANDS)))

    def overall(self) -> float:
        """The chance that a drafted token is accepted, whatever its band (PRIOR_RATE first)."""
        return (sum(self.accepted) + BAND_PRIOR * PRIOR_RATE) / (sum(self.checked) + BAND_PRIOR)

    def chance(self, band: int, overall: float) -> float:
        """The chance that a token in this band is accepted (the overall rate before evidence)."""
        return (self.accepted[band] + BAND_PRIOR * overall) / (self.checked[band] + BAND_PRIOR)

    def cut(self, threshold: float, cap: float) -> float:
        """The lowest head probability from which every band up keeps its tokens at `threshold`
        (at most cap)."""
        overall, lowest = self.overall(), BANDS
        for b in range(BANDS - 1, -1, -1):
            if self.chance(b, overall) < threshold:
                break
            lowest = b
        return min(cap, lowest / BANDS)

    def update(self, confidence: list[float], n_accepted: int) -> None:
        """Drafted tokens with these head probabilities; the first n_accepted were accepted
        (those past the first rejection go unchecked)."""
        d = self._decay
        for i, p in enumerate(confidence[: n_accepted + 1]):
            self.checked = [x * d for x in self.checked]
            self.accepted = [x * d for x in self.accepted]
            b = self.band(p)
            self.checked[b] += 1.0
            self.accepted[b] += float(i < n_accepted)


@dataclass
class ProbeClock:
    """When the next probe is due while plain steps win: plain steps since the last draft and
    the gap the probes are at (carried from one generation to the next, like the acceptance:
    short generations would otherwise each probe at the first gap)."""

    plain_run: int = 0
    gap: float = PROBE_FIRST


@dataclass
class Estimates:
    """What a policy knows, and the next generation on the model starts from."""

    acceptance: Acceptance
    confidence: ConfidenceMap
    probes: ProbeClock = field(default_factory=ProbeClock)


_CARRIED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {key: Estimates}
_CARRIED_LOCK = threading.Lock()


def carried(model, key, window: int) -> Estimates:
    """A new policy's estimates (key: drafter, longest draft, mode): the last ones of this model
    and key (the evidence capped at CARRY windows), else the priors; the new policy's become the
    model's last."""
    est = Estimates(Acceptance(key[1], window), ConfidenceMap(CONFIDENCE_WINDOW * window))
    if model is None:
        return est
    with _CARRIED_LOCK:
        per_model = _CARRIED.setdefault(model, {})
        last = per_model.get(key)
        if last is not None:
            acc = last.acceptance
            most = max(acc.reached, default=0.0)
            f = min(1.0, CARRY * window / most) if most > 0 else 1.0
            est.acceptance.reached = [x * f for x in acc.reached]
            est.acceptance.accepted = [x * f for x in acc.accepted]
            g = min(1.0, CARRY * window / max(acc.tried, default=0.0)) if max(acc.tried, default=0.0) > 0 else 1.0
            est.acceptance.tried = [x * g for x in acc.tried]
            est.acceptance.drafted = [x * g for x in acc.drafted]
            est.confidence.checked = list(last.confidence.checked)
            est.confidence.accepted = list(last.confidence.accepted)
            est.probes = ProbeClock(last.probes.plain_run, last.probes.gap)
        per_model[key] = est
    return est
