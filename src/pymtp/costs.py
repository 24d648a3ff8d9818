"""What verifying and drafting cost, for one model on one machine (pymtp.policy's auto policy).

CostModel: c_verify(n, pos) = load * shape(n) * (W(n) + A * n * pos): W(n) the seconds of an
n-row decode at the start of a context, calibrated once per model and thread count in a fraction
of a second on a scratch context (cached for the process: costs_for); A the attention's extra
seconds per row and cached position (from the same calibration, when the budget allows a
longer fill). The step timings the speculator measures anyway correct it in two parts: `load`,
how much slower than the calibration this machine runs now (the median of the last few verifies,
whatever their row count: a burst of load or a preempted step moves every row count alike, and
one outlier moves none), and shape(n), a slow correction of W(n)'s shape per row count. A draft
token's seconds are learned relative to the same load (a draft timed under load stays right when
the load goes), per mode (greedy or sampled drafts), as are a step's overhead outside the decodes
and the head's catch-up: the seconds per token a draft after plain steps spends feeding the head
the tokens those steps emitted (every plain step's token is fed to the head at the next draft).
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
import weakref

import numpy as np

#: Calibration: seconds it may take, and repeats per row count (the fastest one counts). One row,
#: two rows and the most rows are measured whatever the budget: on a large model the budget held
#: one and two rows only, and the rest, extrapolated from their slope, came out 15-25% too cheap
#: (the ~1.5B echo fixture: 4 rows 1.33x one row against 1.46-1.62x measured), which the load
#: then took on for every row count.
CALIBRATION_BUDGET = 0.4
CALIBRATION_REPEATS = 3
#: The head's catch-up per token before it was timed, relative to a draft token (a batch of
#: fed rows costs the head less per row than one decode).
CATCH_UP_PRIOR = 0.25
#: After plain steps, the head is fed this many of the tokens they emitted (the last ones; the rest
#: is skipped: pymtp.mtp_drafter). Feeding all of them (about 30 after a run of plain steps on the
#: default model) was most of a probe's cost; acceptance against cost: docs/performance/drafting.md.
CATCH_UP_KEEP = 6
#: A Batch's texts share the head's draft decodes (one per draft position, pymtp.mtp_drafter):
#: a draft token at a position another text's draft already decodes costs this share of a lone
#: draft token before it was timed (4 texts drafting 1 token each: 3.2 ms against 1.4 ms for one,
#: a share of 0.43, the default model at 2 threads on the 2-core Zen 4).
DRAFT_SHARE_PRIOR = 0.4
#: A draft's later head decodes against its first, before drafts of two lengths were timed: the
#: first decode also feeds the head the tokens the last verify accepted, the later ones one row
#: each (echo-70, 2-core Zen 4: 2.7 / 3.25 / 4.3 ms for drafts of 1 / 2 / 3 tokens).
NEXT_PRIOR = 0.35
#: Verifies the load is the median of.
LOAD_SPAN = 9
#: Pseudo-counts of the calibration's shape of W(n) against the learned one.
SHAPE_PRIOR = 2.0
#: A timing further than this factor from the prediction is clipped to it before it teaches the
#: shape or the draft cost (a step preempted by another process is not the model's cost).
CLIP = 1.5


_NONE = (0.0, 0.0)


class CostModel:
    """Seconds of a verify of n rows at context position pos, and of one draft token.

    ``rows`` maps row counts to the seconds of a decode at the start of a context (W(n));
    others are interpolated linearly (and extrapolated from the last two). ``attn``: extra
    seconds per row per cached position. ``learn=False`` freezes it (tests inject a table)."""

    def __init__(
        self,
        rows: dict[int, float],
        c_draft: float,
        attn: float = 0.0,
        *,
        learn: bool = True,
        window: int = 24,
        overhead: tuple[float, float] = (0.0, 0.0),
        catch_up: float = 0.0,
    ) -> None:
        if 1 not in rows or any(n < 1 or t <= 0 for n, t in rows.items()):
            raise ValueError("a cost table needs positive seconds for 1 row (and any other row counts >= 1)")
        self._n = np.array([0] + sorted(rows), dtype=float)
        self._t = np.array([0.0] + [rows[n] for n in sorted(rows)])
        self.attn = max(0.0, float(attn))
        self.learn = learn
        self._decay = 1.0 - 1.0 / window
        self._c_draft = float(c_draft)  # priors: a draft token, a plain / drafting step's overhead
        self._overhead = list(overhead)
        self._catch_up = max(0.0, float(catch_up))  # prior: the head's seconds per missed token
        self._means: dict[tuple, list[float]] = {}  # learned: key -> [decayed mean, weight]
        self._w: dict[int, float] = {}
        # lone drafts: ("len", mode, head decodes) -> [decayed mean seconds at load 1, weight]
        self._lengths: dict[tuple, list[float]] = {}
        # the last verifies: (rows, measured / (calibrated * shape))
        self._recent: collections.deque[tuple[int, float]] = collections.deque(maxlen=LOAD_SPAN)
        self._load = 1.0  # their median (kept: the policy asks every step)
        self._shape: dict[int, list[float]] = {}  # rows -> decayed [sum of measured / (calibrated * load), weight]
        self._lock = threading.Lock()

    @classmethod
    def table(
        cls,
        rows: dict[int, float],
        c_draft: float,
        attn: float = 0.0,
        overhead: tuple[float, float] = (0.0, 0.0),
        catch_up: float = 0.0,
    ) -> CostModel:
        """A fixed cost table (no calibration, no learning): for tests and what-ifs."""
        return cls(rows, c_draft, attn, learn=False, overhead=overhead, catch_up=catch_up)

    def weights(self, n: int) -> float:
        """W(n): the calibrated seconds of n rows at the start of a context (cached per n: the
        policy asks every step)."""
        w = self._w.get(n)
        if w is None:
            ns, ts = self._n, self._t
            if n <= ns[-1]:
                w = float(np.interp(n, ns, ts))
            else:  # beyond the table: the slope of its last two points
                slope = (ts[-1] - ts[-2]) / (ns[-1] - ns[-2])
                w = float(ts[-1] + slope * (n - ns[-1]))
            self._w[n] = w
        return w

    def base(self, n: int, pos: float = 0.0) -> float:
        """The calibrated seconds of n rows at mean position pos (no online correction)."""
        return self.weights(n) + self.attn * n * pos

    def load(self) -> float:
        """How much slower than the calibration the machine runs now: the median of the last
        LOAD_SPAN verifies' measured / predicted seconds (1 before any)."""
        return self._load

    def shape(self, n: int) -> float:
        """The learned correction of W(n)'s shape: its decayed mean, shrunk towards 1 (the
        calibration's shape) by SHAPE_PRIOR pseudo-counts."""
        s, w = self._shape.get(n, _NONE)
        return (s + SHAPE_PRIOR) / (w + SHAPE_PRIOR)

    def ratio(self, n: int) -> float:
        """Measured over calibrated time, for n rows: load() * shape(n)."""
        return self.load() * self.shape(n)

    def seen(self, n: int) -> float:
        """How many verifies of n rows were timed (decayed)."""
        return self._shape.get(n, _NONE)[1] if self.learn else float("inf")

    def verify(self, n: int, pos: float = 0.0) -> float:
        """Predicted seconds of a verify of n rows at mean position pos."""
        return self.ratio(n) * self.base(n, pos) if n > 0 else 0.0

    def added(self, before: int, n: int, pos: float = 0.0) -> float:
        """Seconds n more rows add to a verify that already carries `before` rows."""
        return self.verify(before + n, pos) - self.verify(before, pos)

    # Draft cost and step overhead depend on the mode ("greedy" or "sample": sampled drafts
    # choose each token in Python), so each mode learns its own.

    def draft_cost(self, mode: str = "greedy") -> float:
        """Seconds per draft token (the head's decodes and the token choice) at the current
        load (learned as seconds at the calibration's load)."""
        return self._mean(("draft", mode), self._c_draft) * self.load()

    def draft_share(self, mode: str = "greedy") -> float:
        """The seconds of a draft token that rides on a head decode another text's draft makes
        (in a Batch), relative to a lone draft token's (draft_cost)."""
        return self._mean(("draft_share", mode), DRAFT_SHARE_PRIOR)

    def draft_timings(self, mode: str = "greedy") -> float:
        """How many drafts were timed in this mode (decayed; infinite for a fixed table)."""
        v = self._means.get(("draft", mode))
        return (0.0 if v is None else v[1]) if self.learn else float("inf")

    def draft_seconds(self, n: float, mode: str = "greedy") -> float:
        """Seconds of a lone draft of n head decodes (n may be an expected, fractional count):
        first + (n - 1) * next at the current load (0 for n <= 0)."""
        if n <= 0:
            return 0.0
        first, nxt = self.draft_parts(mode)
        return first + (n - 1.0) * nxt

    def draft_parts(self, mode: str = "greedy") -> tuple[float, float]:
        """(first, next): the seconds of a lone draft's first head decode and of each later one,
        at the current load. Fitted to the mean seconds of the draft lengths timed (a line,
        weighted by their timings); from one length alone, with next = NEXT_PRIOR * first; before
        any (or for a fixed table), draft_cost each, as a per-token price."""
        pts = [(n, v[0], v[1]) for (kind, m, n), v in self._lengths.items() if m == mode and v[1] > 0]
        if not pts:
            c = self.draft_cost(mode)
            return c, c
        load = self.load()
        if len({n for n, _, _ in pts}) == 1:
            n, t, _ = pts[0]
            first = t / (1.0 + (n - 1) * NEXT_PRIOR)
            return first * load, NEXT_PRIOR * first * load
        w = sum(p[2] for p in pts)
        mx = sum(p[2] * (p[0] - 1) for p in pts) / w
        my = sum(p[2] * p[1] for p in pts) / w
        sxx = sum(p[2] * (p[0] - 1 - mx) ** 2 for p in pts)
        sxy = sum(p[2] * (p[0] - 1 - mx) * (p[1] - my) for p in pts)
        nxt = sxy / sxx
        first = my - nxt * mx
        # (a few noisy timings may tilt the line: neither part below a tenth of the other's scale)
        scale = max(my / (1.0 + mx), 1e-12)
        first, nxt = max(first, 0.1 * scale), max(nxt, 0.1 * scale)
        return first * load, nxt * load

    def batch_draft_seconds(self, decodes: list[int], mode: str = "greedy") -> float:
        """Seconds of a Batch's drafting phase where text i made decodes[i] head decodes: one
        head decode per draft position, shared by the texts that reach it, priced as a lone
        draft's part there (first, or next) for the first of them and draft_share of it for each
        other."""
        lone, extra = self._batch_draft_parts(decodes, mode)
        return lone + self.draft_share(mode) * extra

    def _batch_draft_parts(self, decodes: list[int], mode: str) -> tuple[float, float]:
        """(lone, extra): the lone draft's parts at every position some text reaches, and the
        same parts counted once more for each further text that reaches the position."""
        first, nxt = self.draft_parts(mode)
        lone = extra = 0.0
        for j in range(max(decodes, default=0)):
            part = nxt if j else first
            lone += part
            extra += part * (sum(n > j for n in decodes) - 1)
        return lone, extra

    def observe_batch_draft(self, decodes: list[int], seconds: float, mode: str = "greedy") -> None:
        """A Batch's drafting phase took these seconds, text i making decodes[i] head decodes
        (batch_draft_seconds). One text drafting: a lone draft. Several, once lone drafts were
        timed twice: the share of a draft decode another text's draft already makes, against
        the lone parts at the positions the texts shared (learned per token, a phase of 2 texts
        drafting 2 tokens each, 2.7 + 0.55 ms lone, measured against 2 x a 1.6 ms per-token
        mean: a share near 0 where it is 0.4). Before that, per token (observe_draft)."""
        decodes = [n for n in decodes if n > 0]
        if not decodes or seconds <= 0:
            return
        if len(decodes) == 1:
            self.observe_draft(decodes[0], seconds, mode)
            return
        if self.draft_timings(mode) < 2.0:
            self.observe_draft(sum(decodes), seconds, mode, calls=max(decodes))
            return
        lone, extra = self._batch_draft_parts(decodes, mode)
        if extra > 0:
            x = (seconds - lone) / extra
            self._observe(("draft_share", mode), DRAFT_SHARE_PRIOR, 0.0, min(1.0, max(0.0, x)))
        else:  # (texts that draft at no common position: a lone draft's length each, not timed apart)
            self._observe(("draft", mode), self._c_draft, 0.0, seconds / sum(decodes) / self.load(), clip=True)

    @property
    def c_draft(self) -> float:
        return self.draft_cost()

    def overhead(self, drafting: bool, mode: str = "greedy") -> float:
        """Seconds a step spends outside the draft and verify decodes (choosing, accepting,
        handing rows over): a plain step's, or a drafting step's."""
        return self._mean(("overhead", drafting, mode), self._overhead[int(drafting)])

    def catch_up(self, mode: str = "greedy") -> float:
        """Seconds per token the head spends, at the next draft, on a token a plain step emitted
        that it is fed (at the current load; it is fed the last CATCH_UP_KEEP of them)."""
        return self._mean(("catch", mode), self._catch_up) * self.load()

    def observe_catch_up(self, n_tokens: int, seconds: float, mode: str = "greedy") -> None:
        """A draft after plain steps spent these seconds (beyond its draft tokens') feeding the
        head n_tokens of the tokens those steps emitted."""
        if n_tokens >= 1 and seconds >= 0:
            self._observe(("catch", mode), self._catch_up, 0.0, seconds / n_tokens / self.load(), clip=True)

    def observe_overhead(self, drafting: bool, seconds: float, mode: str = "greedy") -> None:
        if seconds >= 0:
            self._observe(("overhead", drafting, mode), self._overhead[int(drafting)], 0.0, seconds)

    def _mean(self, key, prior: float) -> float:
        v = self._means.get(key)
        return prior if v is None else v[0]

    def _observe(self, key, prior: float, prior_weight: float, x: float, clip: bool = False) -> None:
        if not self.learn:
            return
        with self._lock:
            v = self._means.setdefault(key, [prior, prior_weight])
            if clip and v[1] >= 2.0:  # (after two timings: until then the prior may be far off)
                x = min(max(x, v[0] / CLIP), v[0] * CLIP)
            w = self._decay * v[1]
            v[0] = (w * v[0] + x) / (w + 1.0)
            v[1] = w + 1.0

    def observe_verify(self, n: int, pos: float, seconds: float) -> None:
        """A verify of n rows at mean position pos took these seconds."""
        if not self.learn or n < 1 or seconds <= 0:
            return
        r = seconds / max(self.base(n, pos), 1e-12)
        with self._lock:
            shape = self._shape.setdefault(n, [0.0, 0.0])
            s = (shape[0] + SHAPE_PRIOR) / (shape[1] + SHAPE_PRIOR)
            # The shape learns only from a contrast: this verify against the load that recent
            # verifies of other row counts show. (While one row count alone is timed, a change
            # is the machine's load: the median lags a few steps, and a shape learned from those
            # steps would keep part of the change for good.)
            others = [v for m, v in self._recent if m != n]
            self._recent.append((n, r / s))
            self._load = _median([v for _, v in self._recent])
            if others:
                x = min(max(r / _median(others), s / CLIP), s * CLIP)
                shape[0] = self._decay * shape[0] + x
                shape[1] = self._decay * shape[1] + 1.0

    def observe_draft(self, n_tokens: int, seconds: float, mode: str = "greedy", calls: int | None = None) -> None:
        """Drafting n_tokens took these seconds (decodes of the head and token choice) in `calls`
        head decodes (a Batch's texts share one per draft position; None: one per token, as
        alone); learned relative to the current load. The first timing replaces the
        calibration's guess. Where tokens shared decodes, once a lone token was timed, the step
        teaches the share (draft_share) the shared ones cost; before, the lone token's seconds
        with the share as it stands. (Learned as seconds per token, 4 texts drafting one token
        each made a draft token look 0.8 ms where one text's costs 1.4: a text drafting beside
        plain ones paid 1.75x what it was priced.)"""
        if n_tokens < 1 or seconds <= 0:
            return
        calls = n_tokens if calls is None else max(1, min(calls, n_tokens))
        shared = n_tokens - calls
        if shared and self.draft_timings(mode) >= 2.0:
            x = (seconds / self.draft_cost(mode) - calls) / shared
            self._observe(("draft_share", mode), DRAFT_SHARE_PRIOR, 0.0, min(1.0, max(0.0, x)))
            return
        per = seconds / (calls + shared * self.draft_share(mode))
        self._observe(("draft", mode), self._c_draft, 0.0, per / self.load(), clip=True)
        if not shared and self.learn:  # a lone draft: its length's mean (draft_parts)
            key = ("len", mode, n_tokens)
            with self._lock:
                v = self._lengths.get(key)
                x = seconds / self.load()
                if v is None:
                    self._lengths[key] = [x, 1.0]
                else:
                    if v[1] >= 2.0:  # (a preempted draft is not the head's cost)
                        x = min(max(x, v[0] / CLIP), v[0] * CLIP)
                    w = self._decay * v[1]
                    v[0], v[1] = (w * v[0] + x) / (w + 1.0), w + 1.0

    def describe(self) -> dict:
        return {
            "rows": {int(n): float(t) for n, t in zip(self._n[1:], self._t[1:])},
            "attn": self.attn,
            "c_draft": {m: self.draft_cost(m) for m in ("greedy", "sample")},
            "draft_parts": {m: self.draft_parts(m) for m in ("greedy", "sample")},
            "draft_share": {m: self.draft_share(m) for m in ("greedy", "sample")},
            "overhead": {m: [self.overhead(False, m), self.overhead(True, m)] for m in ("greedy", "sample")},
            "catch_up": {m: self.catch_up(m) for m in ("greedy", "sample")},
            "load": self.load(),
            "shape": {n: self.shape(n) for n in sorted(self._shape)},
        }


def calibrate(model, max_rows: int, *, budget: float = CALIBRATION_BUDGET, n_threads: int | None = None) -> CostModel:
    """Measure W(n) for n = 1 .. max_rows (a few row counts, within `budget` seconds) and the
    attention's cost per position on a scratch context of `model`, then free it."""
    from .model import (
        TargetContext,  # (import here: policy.py is imported by the engine)
    )

    t_start = time.perf_counter()
    sizes = sorted({1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64} & set(range(1, max_rows + 1)) | {max_rows})
    order = list(dict.fromkeys([1, 2, max_rows, *sizes]))
    fill = 256  # positions for the attention measurement
    n_ctx = fill + max(max_rows, 16) + 8
    ctx = TargetContext(model, n_ctx=n_ctx, n_batch=max(fill, max_rows), n_threads=n_threads)
    try:
        vocab = max(2, model.n_vocab)
        toks = [(11 + 7 * i) % vocab for i in range(n_ctx)]
        p0 = 8
        ctx.decode(toks[:p0], 0)  # a short prefix (and the first decode's warm-up)
        end = [p0]  # the scratch sequence's length

        def rewind(pos: int) -> None:
            if end[0] > pos:
                if model.is_recurrent:  # recurrent state cannot drop a decode: start over
                    ctx.seq_rm(0)
                    ctx.decode(toks[:pos], 0, output=_last_only(pos))
                else:
                    ctx.seq_rm(pos)
            end[0] = pos

        def once(n: int, pos: int) -> float:
            rewind(pos)
            t = time.perf_counter()
            ctx.decode(toks[pos : pos + n], pos)
            end[0] = pos + n
            return time.perf_counter() - t

        def timed(n: int, pos: int) -> float:
            return min(once(n, pos) for _ in range(CALIBRATION_REPEATS))

        once(1, p0)  # warm-up
        # Row counts in rounds (the fastest of each counts), so that a burst of load on a shared
        # machine does not fall on one row count alone; later rounds add row counts while the
        # budget lasts.
        rows: dict[int, float] = {}
        needed = min(3, len(order))  # 1, 2 and max_rows: measured whatever the budget
        for n in order:
            if len(rows) >= needed and time.perf_counter() - t_start > budget * 0.6:
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
        if model.is_recurrent:
            est_fill *= CALIBRATION_REPEATS  # each repeat decodes the fill again (rewind)
        if time.perf_counter() - t_start + est_fill < budget:
            rewind(p0)
            ctx.decode(toks[p0:fill], p0, output=_last_only(fill - p0))
            end[0] = fill
            far = timed(1, fill)
            attn = max(0.0, (far - rows[1]) / (fill - p0))
    finally:
        ctx.close()
    # Prior for a draft token: the head is about one block of the trunk's n_layer plus a head;
    # the speculator's own timings replace it after the first drafting steps.
    c_draft = rows[1] * min(0.5, 2.0 / (getattr(model, "n_layer", 8) + 1))
    return CostModel(rows, c_draft, attn, catch_up=CATCH_UP_PRIOR * c_draft)


def _median(xs: list[float]) -> float:
    """(a few values: sorted() beats numpy here)"""
    ordered = sorted(xs)
    m = len(ordered) // 2
    return ordered[m] if len(ordered) % 2 else 0.5 * (ordered[m - 1] + ordered[m])


def _last_only(n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.uint8)
    out[-1] = 1
    return out


_COSTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {threads: CostModel}
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
