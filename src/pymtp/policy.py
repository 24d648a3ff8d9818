"""How long each draft is: the policies MTPSpeculator asks once per step.

* ``auto`` (AutoPolicy, the default): each step, the draft length k in {0, 1, ..., K} with the
  most expected tokens per second,

      E[tokens](k) / cost(k),   E[tokens](k) = 1 + sum_{i<=k} prod_{j<=i} a_j,
                                cost(k) = c_verify(k + 1 rows) + k * c_draft   (k = 0: a plain step),

  with a_j the recent acceptance at draft position j (decayed counts with a prior) and the
  costs predicted by a CostModel of this model on this machine. While k = 0 wins it drafts one
  token now and then (a probe, with backoff) so that its acceptance estimate stays current.
* ``fixed`` / ``adaptive`` (DraftPolicy): the earlier policies (a fixed length with cooldown;
  a line fitted to verify times), kept for research and benchmarks.

CostModel: c_verify(n, pos) = ratio(n) * (W(n) + A * n * pos): W(n) the seconds of an n-row
decode at the start of a context, calibrated once per model and thread count in a fraction of
a second on a scratch context (cached for the process); A the attention's extra seconds per
row and cached position (from the same calibration, when the budget allows a longer fill); and
ratio(n) a decayed correction from the step timings the speculator measures anyway. In a Batch
the sequences share one verify: a sequence pays the rows it adds, c(b + k + 1) - c(b).
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np

from .config import SpecConfig

#: Acceptance of a draft position before any evidence (and what an unseen position borrows).
PRIOR_RATE = 0.6
#: Plain steps between probes while k = 0 wins: the first gap, and the most it backs off to.
PROBE_FIRST, PROBE_MAX = 8, 64
#: ... the shortest gap, after accepted probes; the share of the time probes may lose at most,
#: and the longest gap that share may ask for.
PROBE_MIN, PROBE_BUDGET, PROBE_CAP = 4, 0.02, 256
#: The highest confidence cut auto sets (a head's top probability is seldom above it).
P_MIN_CAP = 0.9
#: Calibration: seconds it may take, and repeats per row count (the fastest one counts).
CALIBRATION_BUDGET = 0.4
CALIBRATION_REPEATS = 3


_NONE = (0.0, 0.0)


# ---- costs ---------------------------------------------------------------------------------------


class CostModel:
    """Seconds of a verify of n rows at context position pos, and of one draft token.

    ``rows`` maps row counts to the seconds of a decode at the start of a context (W(n));
    others are interpolated linearly (and extrapolated from the last two). ``attn``: extra
    seconds per row per cached position. ``learn=False`` freezes it (tests inject a table)."""

    def __init__(self, rows: dict[int, float], c_draft: float, attn: float = 0.0, *, learn: bool = True,
                 window: int = 24, overhead: tuple[float, float] = (0.0, 0.0)) -> None:
        if 1 not in rows or any(n < 1 or t <= 0 for n, t in rows.items()):
            raise ValueError("a cost table needs positive seconds for 1 row (and any other row counts >= 1)")
        self._n = np.array([0] + sorted(rows), dtype=float)
        self._t = np.array([0.0] + [rows[n] for n in sorted(rows)])
        self.attn = max(0.0, float(attn))
        self.learn = learn
        self._decay = 1.0 - 1.0 / window
        self._c_draft = float(c_draft)         # priors: a draft token, a plain / drafting step's overhead
        self._overhead = list(overhead)
        self._means: dict[tuple, list[float]] = {}   # learned: key -> [decayed mean, weight]
        self._w: dict[int, float] = {}
        self._ratio: dict[int, list[float]] = {}   # rows -> decayed [sum of measured/predicted, weight]
        self._all = [0.0, 0.0]
        self._lock = threading.Lock()

    @classmethod
    def table(cls, rows: dict[int, float], c_draft: float, attn: float = 0.0,
              overhead: tuple[float, float] = (0.0, 0.0)) -> CostModel:
        """A fixed cost table (no calibration, no learning): for tests and what-ifs."""
        return cls(rows, c_draft, attn, learn=False, overhead=overhead)

    def weights(self, n: int) -> float:
        """W(n): the calibrated seconds of n rows at the start of a context (cached per n: the
        policy asks every step)."""
        w = self._w.get(n)
        if w is None:
            ns, ts = self._n, self._t
            if n <= ns[-1]:
                w = float(np.interp(n, ns, ts))
            else:                               # beyond the table: the slope of its last two points
                slope = (ts[-1] - ts[-2]) / (ns[-1] - ns[-2])
                w = float(ts[-1] + slope * (n - ns[-1]))
            self._w[n] = w
        return w

    def base(self, n: int, pos: float = 0.0) -> float:
        """The calibrated seconds of n rows at mean position pos (no online correction)."""
        return self.weights(n) + self.attn * n * pos

    def ratio(self, n: int) -> float:
        """Measured over calibrated time, for n rows: its own decayed mean shrunk towards the mean
        over all row counts (which starts at 1)."""
        g = (self._all[0] + 1.0) / (self._all[1] + 1.0)
        s, w = self._ratio.get(n, _NONE)
        return (s + 2.0 * g) / (w + 2.0)

    def seen(self, n: int) -> float:
        """How many verifies of n rows were timed (decayed)."""
        return self._ratio.get(n, _NONE)[1] if self.learn else float("inf")

    def verify(self, n: int, pos: float = 0.0) -> float:
        """Predicted seconds of a verify of n rows at mean position pos."""
        return self.ratio(n) * self.base(n, pos) if n > 0 else 0.0

    def added(self, before: int, n: int, pos: float = 0.0) -> float:
        """Seconds n more rows add to a verify that already carries `before` rows."""
        return self.verify(before + n, pos) - self.verify(before, pos)

    # Draft cost and step overhead depend on the mode ("greedy" or "sample": sampled drafts
    # choose each token in Python), so each mode learns its own.

    def draft_cost(self, mode: str = "greedy") -> float:
        """Seconds per draft token (the head's decodes and the token choice)."""
        return self._mean(("draft", mode), self._c_draft)

    @property
    def c_draft(self) -> float:
        return self.draft_cost()

    def overhead(self, drafting: bool, mode: str = "greedy") -> float:
        """Seconds a step spends outside the draft and verify decodes (choosing, accepting,
        handing rows over): a plain step's, or a drafting step's."""
        return self._mean(("overhead", drafting, mode), self._overhead[int(drafting)])

    def observe_overhead(self, drafting: bool, seconds: float, mode: str = "greedy") -> None:
        if seconds >= 0:
            self._observe(("overhead", drafting, mode), self._overhead[int(drafting)], 0.0, seconds)

    def _mean(self, key, prior: float) -> float:
        v = self._means.get(key)
        return prior if v is None else v[0]

    def _observe(self, key, prior: float, prior_weight: float, x: float) -> None:
        if not self.learn:
            return
        with self._lock:
            v = self._means.setdefault(key, [prior, prior_weight])
            w = self._decay * v[1]
            v[0] = (w * v[0] + x) / (w + 1.0)
            v[1] = w + 1.0

    def observe_verify(self, n: int, pos: float, seconds: float) -> None:
        """A verify of n rows at mean position pos took these seconds."""
        if not self.learn or n < 1 or seconds <= 0:
            return
        r = min(5.0, max(0.2, seconds / max(self.base(n, pos), 1e-12)))  # a preempted step is not the model
        d = self._decay
        with self._lock:
            for acc in (self._ratio.setdefault(n, [0.0, 0.0]), self._all):
                acc[0] = d * acc[0] + r
                acc[1] = d * acc[1] + 1.0

    def observe_draft(self, n_tokens: int, seconds: float, mode: str = "greedy") -> None:
        """Drafting n_tokens took these seconds (decodes of the head and token choice)."""
        if n_tokens >= 1 and seconds > 0:
            self._observe(("draft", mode), self._c_draft, 1.0, seconds / n_tokens)

    def describe(self) -> dict:
        return {"rows": {int(n): float(t) for n, t in zip(self._n[1:], self._t[1:])}, "attn": self.attn,
                "c_draft": {m: self.draft_cost(m) for m in ("greedy", "sample")},
                "overhead": {m: [self.overhead(False, m), self.overhead(True, m)] for m in ("greedy", "sample")},
                "ratio": {n: self.ratio(n) for n in sorted(self._ratio)}}


def calibrate(model, max_rows: int, *, budget: float = CALIBRATION_BUDGET, n_threads: int | None = None) -> CostModel:
    """Measure W(n) for n = 1 .. max_rows (a few row counts, within `budget` seconds) and the
    attention's cost per position on a scratch context of `model`, then free it."""
    from .model import (
        TargetContext,  # (import here: policy.py is imported by the engine)
    )

    t_start = time.perf_counter()
    sizes = sorted({1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64} & set(range(1, max_rows + 1)) | {max_rows})
    order = [1, 2, max_rows] + [n for n in sizes if n not in (1, 2, max_rows)]
    fill = 256                                 # positions for the attention measurement
    n_ctx = fill + max(max_rows, 16) + 8
    ctx = TargetContext(model, n_ctx=n_ctx, n_batch=max(fill, max_rows), n_threads=n_threads)
    try:
        vocab = max(2, model.n_vocab)
        toks = [(11 + 7 * i) % vocab for i in range(n_ctx)]
        p0 = 8
        ctx.decode(toks[:p0], 0)               # a short prefix (and the first decode's warm-up)

        def once(n: int, pos: int) -> float:
            ctx.seq_rm(pos)
            t = time.perf_counter()
            ctx.decode(toks[pos:pos + n], pos)
            return time.perf_counter() - t

        def timed(n: int, pos: int) -> float:
            return min(once(n, pos) for _ in range(CALIBRATION_REPEATS))

        once(1, p0)                            # warm-up
        # Row counts in rounds (the fastest of each counts), so that a burst of load on a shared
        # machine does not fall on one row count alone; later rounds add row counts while the
        # budget lasts.
        rows: dict[int, float] = {}
        for n in order:
            if len(rows) >= 2 and time.perf_counter() - t_start > budget * 0.6:
                break
            rows[n] = float("inf")
            for m, t in rows.items():
                rows[m] = min(t, once(m, p0))
        for _ in range(CALIBRATION_REPEATS - 1):
            for m, t in rows.items():
                rows[m] = min(t, once(m, p0))
        # n rows cost at least what fewer rows cost and at most n single-row decodes
        for a, b in itertools.pairwise(sorted(rows)):
            rows[b] = min(max(rows[b], rows[a]), b * rows[1])
        attn = 0.0
        # The fill costs about fill / max_rows decodes of max_rows rows: only when it fits the budget.
        est_fill = rows.get(max_rows, rows[1]) * fill / max(max_rows, 1) + 2 * CALIBRATION_REPEATS * rows[1]
        if time.perf_counter() - t_start + est_fill < budget:
            ctx.seq_rm(p0)
            ctx.decode(toks[p0:fill], p0, output=_last_only(fill - p0))
            far = timed(1, fill)
            attn = max(0.0, (far - rows[1]) / (fill - p0))
    finally:
        ctx.close()
    # Prior for a draft token: the head is about one block of the trunk's n_layer plus a head;
    # the speculator's own timings replace it after the first drafting steps.
    c_draft = rows[1] * min(0.5, 2.0 / (getattr(model, "n_layer", 8) + 1))
    return CostModel(rows, c_draft, attn)


def _last_only(n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.uint8)
    out[-1] = 1
    return out


_COSTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # model -> {threads: CostModel}
_COSTS_LOCK = threading.Lock()


def costs_for(model, max_rows: int, n_threads: int | None = None) -> CostModel:
    """The process's CostModel of `model` at this thread count, calibrated on first use (or
    again when a batch needs more rows than were measured... extrapolated instead: see base())."""
    from .model import default_threads

    key = n_threads or default_threads()
    with _COSTS_LOCK:
        per_model = _COSTS.setdefault(model, {})
        cm = per_model.get(key)
        if cm is None:
            cm = per_model[key] = calibrate(model, max(2, max_rows), n_threads=n_threads)
        return cm


def use_costs(model, costs: CostModel | None, n_threads: int | None = None) -> None:
    """Make `costs` the CostModel of `model` (e.g. a fixed table in a test); None: forget it
    (the next use calibrates again)."""
    from .model import default_threads

    key = n_threads or default_threads()
    with _COSTS_LOCK:
        per_model = _COSTS.setdefault(model, {})
        if costs is None:
            per_model.pop(key, None)
        else:
            per_model[key] = costs


# ---- acceptance -----------------------------------------------------------------------------------


class Acceptance:
    """Acceptance per draft position: decayed (accepted, reached) counts. Position j's rate is
    (accepted_j + r_{j-1}) / (reached_j + 1): one pseudo-count at the rate of the position before
    (PRIOR_RATE before position 0), so an unseen position borrows its predecessor's rate."""

    # (plain lists: K is small and the policy runs every step)

    def __init__(self, n: int, window: int) -> None:
        self.reached = [0.0] * n
        self.accepted = [0.0] * n
        self._decay = 1.0 - 1.0 / window

    def rates(self) -> list[float]:
        out, prev = [], PRIOR_RATE
        for a, r in zip(self.accepted, self.reached):
            prev = (a + prev) / (r + 1.0)
            out.append(prev)
        return out

    def discount(self, factor: float) -> None:
        """Make the evidence so far count `factor` times as much."""
        self.reached = [x * factor for x in self.reached]
        self.accepted = [x * factor for x in self.accepted]

    def update(self, n_drafted: int, n_accepted: int) -> None:
        checked = min(n_drafted, n_accepted + 1)     # tokens past the first rejection go unchecked
        d = self._decay
        self.reached = [x * d + (i < checked) for i, x in enumerate(self.reached)]
        self.accepted = [x * d + (i < n_accepted) for i, x in enumerate(self.accepted)]


_ACCEPTANCE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # model -> {key: Acceptance}
#: A new generation starts from the last generation's estimates on the model, counted this much.
CARRY = 0.5


def _carried_acceptance(model, key, window: int) -> Acceptance:
    """A new policy's acceptance estimates: the last ones of this model and drafter (a new text,
    so they count CARRY as much), else the prior; the new policy's become the model's last."""
    n = key[1]
    acc = Acceptance(n, window)
    if model is None:
        return acc
    with _COSTS_LOCK:
        per_model = _ACCEPTANCE.setdefault(model, {})
        last = per_model.get(key)
        if last is not None:
            acc.reached = [x * CARRY for x in last.reached]
            acc.accepted = [x * CARRY for x in last.accepted]
        per_model[key] = acc
    return acc


# ---- the auto policy ------------------------------------------------------------------------------


@dataclass
class Choice:
    """One step's decision: the draft length, whether it was a probe, and the predicted and
    (after the step) measured tokens per second."""

    k: int
    probe: bool
    predicted_tps: float
    tokens: float = 1.0                  # the expected tokens of this sequence's step
    measured_tps: float = 0.0


class AutoPolicy:
    """SpecConfig(policy="auto"): see the module docstring.

    costs: the CostModel (None: the process's calibrated one for target's model, on first use).
    shared: the costs are a Batch's, observed once per batched step by the Batch (update() then
    learns acceptance only)."""

    cooldown_steps_taken = 0

    def __init__(self, config: SpecConfig, n_max: int, *, model=None, costs: CostModel | None = None,
                 shared: bool = False, max_rows: int | None = None, mode: str = "greedy") -> None:
        self.config = config
        self.mode = mode                       # "greedy" or "sample" (draft and step costs differ)
        self.n_max = max(1, n_max)
        self.p_min = config.p_min
        self._model = model
        self._costs = costs
        self._max_rows = max_rows or self.n_max + 1
        self.shared = shared
        self.acceptance = _carried_acceptance(model, (config.drafter, self.n_max, mode), config.adaptive_window)
        self._plain_run = 0                    # plain steps since the last draft
        self._probe_gap = PROBE_FIRST
        self._pos = 0
        self._rows_before = 0
        self._t_chosen = 0.0
        self._drafted_last = True              # the head's queue holds only the last step's tokens
        self._drafted_once = False
        self.trace: list[Choice] = []
        self.last_rates: list[float] = []

    @property
    def costs(self) -> CostModel:
        if self._costs is None:
            if self._model is None:
                raise ValueError("AutoPolicy needs a CostModel or a model to calibrate one")
            self._costs = costs_for(self._model, self._max_rows)
        return self._costs

    def verify_cost(self, k):
        """Seconds of a verify of k draft tokens (k + 1 rows) here (drafters that weigh costs:
        the hybrid's per-source choice)."""
        if np.ndim(k):
            return np.array([self.costs.verify(int(x) + 1, self._pos) for x in np.asarray(k).ravel()])
        return self.costs.verify(int(k) + 1, self._pos)

    def expected(self, n_past: int = 0, rows_before: int = 0, tokens_before: float = 0.0
                 ) -> tuple[list[float], list[float]]:
        """E[tokens](k) and cost(k) for k = 0..K at position n_past, of the whole verify: beside
        rows_before rows of other sequences, which yield tokens_before tokens (in a Batch)."""
        rates = self.acceptance.rates()
        self.last_rates = rates
        c = self.costs
        c_draft, o_plain, o_draft = c.draft_cost(self.mode), c.overhead(False, self.mode), c.overhead(True, self.mode)
        gain, cost, reach = [tokens_before + 1.0], [c.verify(rows_before + 1, n_past) + o_plain], 1.0
        for k in range(1, self.n_max + 1):
            reach *= rates[k - 1]
            gain.append(gain[-1] + reach)
            cost.append(c.verify(rows_before + k + 1, n_past) + k * c_draft + o_draft)
        return gain, [max(x, 1e-12) for x in cost]

    def next_length(self, n_past: int = 0, rows_before: int = 0, tokens_before: float = 0.0) -> int:
        """The draft length of the next step at position n_past (in a Batch: beside rows_before
        rows of the other sequences, which yield tokens_before tokens: see plan_batch)."""
        self._pos, self._rows_before = n_past, rows_before
        gain, cost = self.expected(n_past, rows_before, tokens_before)
        tps = [g / c for g, c in zip(gain, cost)]
        k = max(range(len(tps)), key=tps.__getitem__)
        probe = False
        if k == 0:
            self._plain_run += 1
            # A probe (a draft, to keep the estimate current) is expected to lose
            # `loss` seconds against a plain step: space them so that they cost at most
            # PROBE_BUDGET of the time (and back off further while they are rejected).
            # (the probe drafts the best length but 0: where a long draft pays and a short one
            # does not, a one-token probe would never find out)
            probe_k = max(range(1, len(tps)), key=tps.__getitem__)
            loss = max(0.0, (cost[probe_k] - cost[0]) - (gain[probe_k] - gain[0]) / tps[0])
            gap = self._probe_gap
            if self.costs.seen(self._rows_before + probe_k + 1) >= PROBE_MIN:
                # (until a probe's rows were timed a few times, the calibration alone says what
                # they cost: probe at the plain gap, so that a calibration that a burst of load
                # made too dear is corrected)
                gap = max(gap, min(PROBE_CAP, loss / (PROBE_BUDGET * cost[0])))
            if self._plain_run >= gap:
                k, probe = probe_k, True
        if self.config.p_min == 0.0:
            self.p_min = self._cut(k, probe, tps, cost)
        self.trace.append(Choice(k, probe, float(tps[k]), gain[k] - tokens_before))
        self._t_chosen = time.perf_counter()
        return k

    def _cut(self, k: int, probe: bool, tps: list[float], cost: list[float]) -> float:
        """The confidence cut: when the head proposes a token (its draft decode done), keeping
        it costs its verify row; a token whose head probability (taken as its chance of
        acceptance) is below the tokens the step's rate earns in those seconds costs more than it
        brings. Not for probes: they measure."""
        if k == 0 or probe:
            return 0.0
        c, b = self.costs, self._rows_before
        row = c.verify(b + k + 1, self._pos) - c.verify(b + k, self._pos)
        return min(P_MIN_CAP, max(0.0, tps[k] * row))

    def update(self, n_drafted: int, n_accepted: int, t_draft: float = 0.0, t_verify: float = 0.0) -> None:
        choice = self.trace[-1] if self.trace else None
        step = time.perf_counter() - self._t_chosen if choice is not None else t_draft + t_verify
        if step > 0:
            choice_tps = (n_accepted + 1) / step
            if choice is not None:
                choice.measured_tps = choice_tps
        if not self.shared:
            rows = n_drafted + 1
            self.costs.observe_verify(rows, self._pos, t_verify)
            if choice is not None and len(self.trace) > 1:
                # (not the first step: it also pays one-off set-up; a preempted step is capped)
                self.costs.observe_overhead(n_drafted > 0, min(step - t_draft - t_verify, 2 * (t_draft + t_verify)),
                                            self.mode)
            # a draft after plain steps (or the first) also feeds the head the tokens it missed
            if n_drafted and self._drafted_last and self._drafted_once:
                self.costs.observe_draft(n_drafted, t_draft, self.mode)
        if n_drafted:
            self._drafted_once = True
            self.acceptance.update(n_drafted, n_accepted)
            if choice is not None and choice.probe:
                # A probe that did better than expected: the text may have changed, so the
                # older evidence counts half and the next probe comes sooner. Otherwise back off.
                if n_accepted > choice.tokens - 1.0 + 0.5:
                    self.acceptance.discount(0.5)
                    self._probe_gap = max(PROBE_MIN, self._probe_gap // 2)
                else:
                    self._probe_gap = min(PROBE_MAX, 2 * self._probe_gap)
            elif choice is not None:
                self._probe_gap = PROBE_FIRST
            self._plain_run = 0
        self._drafted_last = n_drafted > 0

    @property
    def catching_up(self) -> bool:
        """Whether the next draft also feeds the head tokens of plain steps (or the prompt): its
        time is then no measure of a draft token's cost."""
        return not (self._drafted_last and self._drafted_once)


def plan_batch(speculators, max_new: list[int | None]) -> list[int]:
    """Draft lengths of a Batch's step: the sequences choose in turn, each beside the rows (and
    expected tokens) of those that chose before and one plain row for each still to choose, so
    each pays what its rows add to the one shared verify."""
    ks: list[int] = []
    rows, tokens, n = 0, 0.0, len(speculators)
    for i, (sp, m) in enumerate(zip(speculators, max_new)):
        later = n - i - 1
        k = sp.draft_length(m, rows_before=rows + later, tokens_before=tokens + later)
        ks.append(k)
        rows += k + 1
        trace = getattr(sp.policy, "trace", None)
        tokens += trace[-1].tokens if trace and trace[-1].k == k else k + 1.0
    return ks


def make_policy(spec: SpecConfig, n_max: int, *, model=None, costs: CostModel | None = None, shared: bool = False,
                max_rows: int | None = None, greedy: bool = True):
    """The policy a SpecConfig asks for (n_max: the longest draft the drafter allows; greedy:
    whether the generation samples, which changes what drafting costs)."""
    if spec.policy == "auto":
        return AutoPolicy(spec, n_max, model=model, costs=costs, shared=shared, max_rows=max_rows,
                          mode="greedy" if greedy else "sample")
    if spec.policy == "adaptive" and not spec.adaptive:
        spec = spec.model_copy(update={"adaptive": True})
    return DraftPolicy(spec, n_max)


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

    def __init__(self, config: SpecConfig, n_max: int) -> None:
        self.config = config
        self.n_max = max(1, min(config.n_draft, n_max))
        self.p_min = config.p_min
        self._decay = 1.0 - 1.0 / config.adaptive_window
        self._reached = np.zeros(self.n_max)     # steps where draft token i was checked
        self._accepted = np.zeros(self.n_max)    # ... and accepted
        self._c_draft = 0.0                      # seconds per draft token (EMA)
        self._fit = np.zeros(5)                  # decayed sums for c_verify: n, x, x^2, y, xy
        self._cool_left = 0
        self.cooldown_steps_taken = 0
        self.last_rates: list[float] = []
        self.trace: list[Choice] = []

    def verify_cost(self, k):
        """Seconds a verify of k draft tokens takes (the fitted line), None before any step."""
        return self._verify_cost(np.asarray(k, dtype=float)) if self._fit[0] > 0 else None

    def _verify_cost(self, k: np.ndarray) -> np.ndarray:
        n, sx, sxx, sy, sxy = self._fit
        mean_x, mean_y = sx / n, sy / n
        var = sxx / n - mean_x * mean_x
        slope = (sxy / n - mean_x * mean_y) / var if var > 0.25 else self._PRIOR_SLOPE * mean_y / (1 + self._PRIOR_SLOPE * mean_x)
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

    def update(self, n_drafted: int, n_accepted: int, t_draft: float = 0.0, t_verify: float = 0.0) -> None:
        if n_drafted == 0:
            return
        if n_accepted == 0 and self.config.cooldown > 0:
            self._cool_left = self.config.cooldown_steps
        if not self.config.adaptive:
            return                                   # the estimates feed only the adaptive choice
        d = self._decay
        self._reached *= d
        self._accepted *= d
        checked = min(n_drafted, n_accepted + 1)    # tokens past the first rejection go unchecked
        self._reached[:checked] += 1
        self._accepted[:n_accepted] += 1
        if t_verify > 0:
            per_tok = t_draft / n_drafted
            self._c_draft = per_tok if self._c_draft == 0 else d * self._c_draft + (1 - d) * per_tok
            self._fit = d * self._fit + np.array([1.0, n_drafted, n_drafted * n_drafted, t_verify, n_drafted * t_verify])
