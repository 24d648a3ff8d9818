"""How long each draft is: the policies MTPSpeculator asks once per step.

* ``auto`` (AutoPolicy, the default): each step, the draft length k in {0, 1, ..., K} with the
  most expected tokens per second,

      E_tokens(k) / cost(k),   E_tokens(k) = 1 + sum_{i<=k} prod_{j<=i} kept_j * a_j,
      cost(k) = c_verify(1 + E[rows]) + c_first + (E[head decodes] - 1) * c_next,
      cost(0) = c_verify(1) + c_catch * min(1, KEEP / gap)            (a plain step),

  with a_j the recent acceptance at draft position j (decayed counts with a prior), kept_j how
  often the confidence cut keeps the head's token there (a dropped token ends the draft: its
  head decode is paid, its verify row is not; E[rows] = sum_j prod_{i<=j} kept_i) and the costs
  predicted by a CostModel of this model on this machine. The same without the cut (kept_j = 1,
  the acceptance of every drafted token) competes: a head that understates its tokens' chance
  drafts without it. While k = 0 wins it drafts now and then (a probe, with backoff) so that its
  estimates stay current; the head is then fed the last KEEP (CATCH_UP_KEEP) tokens the plain
  steps emitted (c_catch per token; a plain step carries its share, with gap the plain steps
  between probes).
* ``fixed`` / ``adaptive`` (DraftPolicy, pymtp.fixed_policy): the earlier policies (a fixed
  length with cooldown; a line fitted to verify times), kept for research and benchmarks.

The costs come from pymtp.costs (CostModel: calibrated per model and thread count, corrected
online), the acceptance estimates from pymtp.estimates. In a Batch the sequences share one
verify and the head's draft decodes: each chooses beside the rows and draft positions the others
bring, one probes a step at most, and their probes share the budget (plan_batch).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .config import SpecConfig
from .costs import CATCH_UP_KEEP, CostModel, calibrate, costs_for, use_costs
from .estimates import Acceptance, carried
from .fixed_policy import DraftPolicy

__all__ = [
    "Acceptance",
    "AutoPolicy",
    "Choice",
    "CostModel",
    "DraftPolicy",
    "calibrate",
    "costs_for",
    "make_policy",
    "observe_batch_draft",
    "plan_batch",
    "use_costs",
]

#: Plain steps between probes while k = 0 wins: the first gap, and the most it backs off to.
PROBE_FIRST, PROBE_MAX = 8, 64
#: ... the shortest gap, after accepted probes; the share of the time probes may lose at most,
#: and the longest gap that share may ask for.
PROBE_MIN, PROBE_BUDGET, PROBE_CAP = 4, 0.02, 256
#: A probe after n plain steps counts min(PROBE_WEIGHT, 1 + n / PROBE_FIRST) times in the
#: acceptance: it stands for steps whose acceptance went unseen. (Counted once, a probe moved an
#: estimate frozen since the plain steps began by 1/16: a dip of the estimate under the break-even
#: rate kept plain steps for good, 73% of the steps where drafting earns 8% more, in the test.)
PROBE_WEIGHT = 2.0
#: In a Batch, each probe that did no better than expected halves the part of PROBE_BUDGET the
#: probes may spend, down to this (one that did better restores it): at 1 thread on 4 streams,
#: where no draft length pays, probes spending the whole 2% took 3.7% of the time for 2.0% in
#: tokens, about auto's whole margin against plain steps (issue #29, round 8).
BATCH_SHARE_MIN = 0.125
#: Until the draft cost was timed this often (per mode: relative to the machine's load, it stays
#: valid), the step after a probe drafts once more to time a draft token without the head's
#: catch-up on the tokens it missed (a probe's draft time is no measure of a draft token).
RETIME_UNTIL = 3
#: Verifies of a row count, one row longer than the best draft's, timed (decayed) before those
#: longer drafts come less often. (The costs' decayed count tends to their window, 24, and never
#: reaches it: at 24 the longer drafts came every PROBE_FIRST steps for good, 12% of the steps
#: drafting one token more than the best.)
STRETCH_SEEN = 16
#: The highest confidence cut auto sets (a head's top probability is seldom above it).
P_MIN_CAP = 0.9
#: Drafts go without the cut only when expected to earn this much more than under it (where the
#: cut drops nothing the two estimates agree, and the cut still drops a token the head doubts).
FREE_MARGIN = 1.02
#: ... and only once this many drafts without a cut were checked (decayed; the prior alone is no
#: evidence that they would earn more).
FREE_EVIDENCE = 2.0
#: Drafts without the cut checked (decayed) before those among drafts under it come less often.
FREE_SEEN = 8.0
#: The draft length of the last steps stays until another is expected to earn this much more.
#: (Each step's estimates move with every accepted or rejected token and every timing: near a
#: tie the best length flipped with them, and each flip went to the length the noise favoured,
#: e.g. 3-token drafts on 27% of the steps where they earn 6% less than 2-token ones.) Plain
#: steps take over without a margin: a draft that loses to them is not held.
HOLD_MARGIN = 1.03
#: In a Batch, a text drafts only where that is expected to earn this much more than its plain
#: step. (Its tokens are a share of the step's, so a draft earns a few percent of it at best,
#: while each estimate of acceptance runs high after a run of accepted tokens: 4 texts of the
#: default model at 2 threads, one row 16% of a 4-row step, drafted at estimates of 0.5-0.9 and
#: their drafting steps took 13.2% of the time beyond plain steps for tokens worth 9.6%:
#: tools/trace_policy.py --streams 4 --drafts 1, before this margin.)
BATCH_MARGIN = 1.03
# ---- the auto policy ------------------------------------------------------------------------------


@dataclass
class Choice:
    """One step's decision: the draft length, whether it was a probe, and the predicted and
    (after the step) measured tokens per second."""

    k: int
    probe: bool
    predicted_tps: float
    tokens: float = 1.0  # the expected tokens of this sequence's step
    measured_tps: float = 0.0


class AutoPolicy:
    """SpecConfig(policy="auto"): see the module docstring.

    costs: the CostModel (None: the process's calibrated one for target's model, on first use).
    shared: the costs are a Batch's, observed once per batched step by the Batch (update() then
    learns acceptance only)."""

    cooldown_steps_taken = 0

    def __init__(
        self,
        config: SpecConfig,
        n_max: int,
        *,
        model=None,
        costs: CostModel | None = None,
        shared: bool = False,
        max_rows: int | None = None,
        mode: str = "greedy",
        n_threads: int | None = None,
    ) -> None:
        self.config = config
        self.mode = mode  # "greedy" or "sample" (draft and step costs differ)
        self.n_max = max(1, n_max)
        self.p_min = config.p_min
        self._model = model
        self._costs = costs
        self._max_rows = max_rows or self.n_max + 1
        self._n_threads = n_threads  # the target's: costs are calibrated per thread count
        self.shared = shared
        # acceptance: of a token the confidence cut kept, per position; acceptance_all: of any
        # drafted token (drafts without a cut); kept: how often the head's token passes the cut,
        # per position (a token the cut drops ends the draft: its head decode is paid, its
        # verify row is not)
        self.acceptance, self.acceptance_all, self.kept, self.probes = carried(
            model, (config.drafter, self.n_max, mode), config.adaptive_window, PROBE_FIRST
        )
        self.asked = 0  # the draft length of this step, as the speculator bounded it
        self._ref_cut = 0.0  # the cut a draft without one would have had (what it would keep)
        self.cutting = True  # whether the drafts are under the confidence cut (or all drafted)
        self._retime = 0  # a draft length to draft again, to time it without the head's catch-up
        self._retiming = False
        # this step's k + 1 draft, to judge (_judge_stretch)
        self._stretch: tuple[int, float, float, float, float] | None = None
        self._free_run = 0  # drafts under the cut since the last one without it
        self._pos = 0
        self._rows_before = 0
        self._t_chosen = 0.0
        self._drafted_last = True  # the head's queue holds only the last step's tokens
        self._drafted_once = False
        self._missed = 0  # tokens of plain steps since the last draft (the head's catch-up)
        self._held = 0  # the draft length chosen last (probes aside)
        # In a Batch, plan_batch sets these before each choice: the draft positions the texts
        # that chose before draft (a token there rides on their head decode), whether this text
        # may probe (one probe a step: the others wait a step), and the texts of the step
        # (their probes share PROBE_BUDGET).
        self.positions_before = 0
        self.may_probe = True
        self.n_texts = 1
        self.trace: list[Choice] = []
        self.last_rates: list[float] = []

    @property
    def costs(self) -> CostModel:
        if self._costs is None:
            if self._model is None:
                raise ValueError("AutoPolicy needs a CostModel or a model to calibrate one")
            self._costs = costs_for(self._model, self._max_rows, self._n_threads)
        return self._costs

    def verify_cost(self, k):
        """Seconds of a verify of k draft tokens (k + 1 rows) here (drafters that weigh costs:
        the hybrid's per-source choice)."""
        if np.ndim(k):
            return np.array([self.costs.verify(int(x) + 1, self._pos) for x in np.asarray(k).ravel()])
        return self.costs.verify(int(k) + 1, self._pos)

    def expected(
        self, n_past: int = 0, rows_before: int = 0, tokens_before: float = 0.0, *, cut: bool = True
    ) -> tuple[list[float], list[float]]:
        """E_tokens(k) and cost(k) for k = 0..K at position n_past, of the whole verify: beside
        rows_before rows of other sequences, which yield tokens_before tokens (in a Batch).

        cut: under the confidence cut, whose drops end a draft: position j is decoded by the head
        when every earlier one was kept, verified when it is kept too, and yields a token when
        it is also accepted (the acceptance counts drafted tokens only, so without the keep rate
        a head whose confident tokens are accepted looked good while the cut dropped most of its
        drafts and each drop paid a head decode for nothing)."""
        rates = self.acceptance.rates()
        if not cut:  # (the acceptance of all tokens borrows that of kept ones as its prior)
            rates = self.acceptance_all.rates(prior=rates[0])
        keep = self.kept.rates() if cut else [1.0] * self.n_max
        self.last_rates = rates
        c = self.costs
        # a draft's first head decode costs more than the later ones (it also feeds the head the
        # tokens the last verify accepted): priced per token, learned from 1-token drafts, longer
        # drafts looked 1.5-2x their cost and auto kept to 1 token
        c_first, c_next = c.draft_parts(self.mode)
        o_plain, o_draft = c.overhead(False, self.mode), c.overhead(True, self.mode)
        share = c.draft_share(self.mode) if self.positions_before else 1.0
        # (a plain step's token is fed to the head at the next draft, a probe's or not, when it is
        # among the last CATCH_UP_KEEP: not counted, a run of plain steps looked free of it, and
        # each probe after one paid it)
        fed = min(1.0, CATCH_UP_KEEP / max(1.0, self.probes.gap))
        gain, cost = [tokens_before + 1.0], [c.verify(rows_before + 1, n_past) + o_plain + fed * c.catch_up(self.mode)]
        reach, kept, rows, drafting = 1.0, 1.0, 0.0, 0.0
        for j in range(self.n_max):
            drafting += kept * (share if j < self.positions_before else 1.0) * (c_next if j else c_first)
            kept *= keep[j]
            rows += kept
            reach *= rates[j] * keep[j]
            gain.append(gain[-1] + reach)
            cost.append(self._verify(rows_before + 1 + rows, n_past) + drafting + o_draft)
        return gain, [max(x, 1e-12) for x in cost]

    def _verify(self, rows: float, n_past: int) -> float:
        """A verify's seconds for an expected (fractional) row count: between the whole ones."""
        c, lo = self.costs, int(rows)
        v, f = c.verify(lo, n_past), rows - lo
        return v + f * (c.verify(lo + 1, n_past) - v) if f > 1e-9 else v

    def next_length(self, n_past: int = 0, rows_before: int = 0, tokens_before: float = 0.0) -> int:
        """The draft length of the next step at position n_past (in a Batch: beside rows_before
        rows of the other sequences, which yield tokens_before tokens: see plan_batch)."""
        self._pos, self._rows_before = n_past, rows_before
        gain, cost = self.expected(n_past, rows_before, tokens_before)
        tps = [g / c for g, c in zip(gain, cost)]
        self.cutting = True
        gain_all = None
        if self.config.p_min == 0.0 and self.acceptance_all.reached[0] >= FREE_EVIDENCE:
            # Drafts under the cut, or every token drafted: whichever is expected to earn more
            # (once drafts without a cut were seen: probes, the k + 1 drafts).
            # (The cut takes the head's probability as a token's chance; a head that understates
            # it, the deep variant's, had most good tokens dropped and its drafts lost to plain
            # steps that drafts without a cut beat.)
            gain_all, cost_all = self.expected(n_past, rows_before, tokens_before, cut=False)
            tps_all = [g / c for g, c in zip(gain_all, cost_all)]
            if max(tps_all[1:]) > FREE_MARGIN * max(tps[1:]):
                gain, cost, tps, self.cutting = gain_all, cost_all, tps_all, False
        k = max(range(len(tps)), key=tps.__getitem__)
        held = self._held
        if k and held and held != k and held < len(tps) and tps[k] < HOLD_MARGIN * tps[held]:
            k = held
        if k and self.n_texts > 1 and tps[k] < BATCH_MARGIN * tps[0]:
            k = 0
        self._held = k
        probe = self._retiming = stretch = False
        self._stretch = None
        if k == 0 and self._retime and self.may_probe:
            # The last step drafted after plain steps: its draft time held the head's catch-up on
            # the tokens it missed, no measure of a draft token. Draft once more to time one.
            k, probe, self._retiming = min(self._retime, self.n_max), True, True
        elif k == 0:
            self.probes.plain_run += 1
            # A probe (a draft, to keep the estimate current) is expected to lose
            # `loss` seconds against a plain step: space them so that they cost at most
            # PROBE_BUDGET of the time (and back off further while they are rejected).
            # (the probe drafts the best length but 0: where a long draft pays and a short one
            # does not, a one-token probe would never find out)
            probe_k = max(range(1, len(tps)), key=tps.__getitem__)
            # (its seconds beyond a plain step's: its draft and rows, and the head's catch-up on
            # the plain steps' last tokens, which cost[0] spreads over the plain steps; left out,
            # a probe in a Batch of 4 texts was priced at half the 10 ms it took)
            gap: float = self.probes.gap
            fed = min(float(self._missed), CATCH_UP_KEEP) - min(1.0, CATCH_UP_KEEP / max(1.0, gap))
            loss = (cost[probe_k] - cost[0]) + fed * self.costs.catch_up(self.mode)
            loss = max(0.0, loss - (gain[probe_k] - gain[0]) / tps[0])
            if self.costs.seen(self._rows_before + probe_k + 1) >= PROBE_MIN:
                # (until a probe's rows were timed a few times, the calibration alone says what
                # they cost: probe at the plain gap, so that a calibration that a burst of load
                # made too dear is corrected)
                # (cost[0] is the whole step's: in a Batch the texts' probes share the budget)
                budget = PROBE_BUDGET * (self.probes.share if self.n_texts > 1 else 1.0)
                gap = max(gap, min(PROBE_CAP, loss * self.n_texts / (budget * cost[0])))
            if self.probes.plain_run >= gap and self.may_probe:
                k, probe = probe_k, True
        elif k < self.n_max and self.costs.learn:
            # While a draft of k wins, a draft of k + 1 now and then (backing off) times a
            # verify of one more row beside those of k: where the calibration made that row too
            # dear (a burst of load), the longer draft would otherwise stay out for good.
            # (every PROBE_MAX steps once those rows were timed STRETCH_SEEN times; before, at a
            # gap that doubles after each that still lost (_judge_stretch): every PROBE_FIRST
            # steps they cost 2-3% on echo-70, where the calibration was right)
            clock = self.probes
            clock.stretch_run += 1
            seen = self.costs.seen(self._rows_before + k + 2) >= STRETCH_SEEN
            if clock.stretch_run >= (PROBE_MAX if seen else clock.stretch_gap):
                # (without the cut: the acceptance of every token stays current too)
                rows = self._rows_before + k + 2
                self._stretch = (k + 1, gain[k + 1], cost[k + 1], self.costs.verify(rows, n_past), tps[k])
                k, clock.stretch_run, stretch = k + 1, 0, True
        if k and not (probe or stretch) and self.cutting and self.config.p_min == 0.0:
            # While drafts go under the cut, one without it now and then (backing off as for the
            # k + 1 drafts), so that the acceptance of the tokens the cut drops is known: where it
            # is high (a head that understates), drafts without the cut win.
            self._free_run += 1
            seen = self.acceptance_all.reached[0] >= FREE_SEEN
            if self._free_run >= (PROBE_MAX if seen else PROBE_FIRST):
                self._free_run, stretch = 0, True
        self._retime = 0
        tokens = gain[k] - tokens_before
        if self.config.p_min == 0.0:
            # the cut this draft has, and the one it would have had (what a cut would keep of a
            # draft without one teaches the keep rate)
            self._ref_cut = self._cut(k, tps, cost)
            free = probe or stretch or not self.cutting
            self.p_min = 0.0 if free else self._ref_cut
            if free and self.cutting:
                if gain_all is None:
                    gain_all = self.expected(n_past, rows_before, tokens_before, cut=False)[0]
                tokens = gain_all[k] - tokens_before
        self.asked = k
        self.trace.append(Choice(k, probe, float(tps[k]), tokens))
        self._t_chosen = time.perf_counter()
        return k

    def _cut(self, k: int, tps: list[float], cost: list[float]) -> float:
        """The confidence cut: when the head proposes a token (its draft decode done), keeping
        it costs its verify row; a token whose head probability (taken as its chance of
        acceptance) is below the tokens the step's rate earns in those seconds costs more than it
        brings. One cut applies at every position of the draft (the drafter's loop ends the draft
        at the first token below it), so it is the price of the draft's cheapest row: a token
        the cut drops where its row costs nothing loses its own row and every later one (set by
        the last, dearest row, a 4-token draft's cut of 0.41 on the deep variant, whose 2-3 rows
        verify in no more than one row's time, dropped the first token in most steps). Dearer
        rows further on are priced in the choice of k, by the keep rates. (Probes, the k + 1
        drafts and drafts where a cut loses draft without one.)"""
        if k == 0:
            return 0.0
        c, b, pos = self.costs, self._rows_before, self._pos
        rows = [c.verify(b + 1 + j, pos) for j in range(k + 1)]
        row = min(rows[j + 1] - rows[j] for j in range(k))
        return min(P_MIN_CAP, max(0.0, tps[k] * row))

    def head_decodes(self, n_drafted: int) -> int:
        """Draft positions the head decoded this step: each token drafted and, where the draft
        ended short of the length asked (a cut), the one dropped."""
        return min(self.asked, n_drafted + 1) if self.asked > 0 else n_drafted

    def update(
        self,
        n_drafted: int,
        n_accepted: int,
        t_draft: float = 0.0,
        t_verify: float = 0.0,
        confidence: list[float] | None = None,
    ) -> None:
        """After a step: n_drafted tokens drafted (of the `asked`), n_accepted accepted, the
        seconds drafting and verifying, and the head's probability of each drafted token."""
        choice = self.trace[-1] if self.trace else None
        step = time.perf_counter() - self._t_chosen if choice is not None else t_draft + t_verify
        if step > 0:
            choice_tps = (n_accepted + 1) / step
            if choice is not None:
                choice.measured_tps = choice_tps
        decodes = self.head_decodes(n_drafted)
        if not self.shared:
            rows = n_drafted + 1
            self.costs.observe_verify(rows, self._pos, t_verify)
            if choice is not None and len(self.trace) > 1:
                # (not the first step: it also pays one-off set-up; a preempted step is capped)
                self.costs.observe_overhead(
                    decodes > 0, min(step - t_draft - t_verify, 2 * (t_draft + t_verify)), self.mode
                )
            # a draft after plain steps (or the first) also feeds the head tokens it missed;
            # the time is per head decode (a token the cut dropped was decoded too: counting
            # only the kept ones made a draft token seem 2-3x dearer than it is)
            if decodes and self._drafted_last and self._drafted_once:
                self.costs.observe_draft(decodes, t_draft, self.mode)
            elif decodes and self._missed and self._drafted_once and self.costs.draft_timings(self.mode) >= 1:
                # after plain steps: what the draft took beyond its draft tokens fed the head
                # the tokens it missed
                extra = t_draft - self.costs.draft_seconds(decodes, self.mode)
                self.costs.observe_catch_up(min(self._missed, CATCH_UP_KEEP), max(0.0, extra), self.mode)
        if decodes and self.p_min > 0.0:
            self.kept.count(decodes, n_drafted)
            if n_drafted:
                self.acceptance.update(n_drafted, n_accepted)
        elif n_drafted:
            # A draft without a cut (a probe, a k + 1 draft, or where the cut loses): every token
            # teaches the acceptance of all tokens; what the cut would have kept of it, the keep
            # rate and the acceptance of kept tokens (after a stretch of dropped drafts, plain
            # steps won and only probes drafted: learned from cut drafts alone, the keep rate
            # stayed low for good).
            weight = 1.0
            if choice is not None and choice.probe and not self._retiming:
                weight = min(PROBE_WEIGHT, 1.0 + self.probes.plain_run / PROBE_FIRST)
            self.acceptance_all.update(n_drafted, n_accepted, weight)
            would = n_drafted
            if self._ref_cut > 0.0 and confidence is not None:
                would = next((i for i, p in enumerate(confidence[:n_drafted]) if p < self._ref_cut), n_drafted)
                self.kept.count(min(would + 1, n_drafted), would)
            if would:
                self.acceptance.update(would, min(n_accepted, would), weight)
        if self._stretch is not None:
            self._judge_stretch(self._stretch, n_drafted, t_verify)
            self._stretch = None
        if decodes:
            if self.catching_up and self.costs.draft_timings(self.mode) < RETIME_UNTIL:
                self._retime = decodes
            self._drafted_once = True
            if choice is not None and choice.probe and not self._retiming:
                # A probe that did better than expected: the text may have changed, so the
                # older evidence counts half and the next probe comes sooner. Otherwise back off.
                if n_accepted > choice.tokens - 1.0 + 0.5:
                    self.acceptance.discount(0.5)
                    self.acceptance_all.discount(0.5)
                    self.probes.gap = max(PROBE_MIN, self.probes.gap // 2)
                    self.probes.share = 1.0
                else:
                    self.probes.gap = min(PROBE_MAX, 2 * self.probes.gap)
                    if self.n_texts > 1:
                        self.probes.share = max(BATCH_SHARE_MIN, self.probes.share / 2)
            elif choice is not None and not choice.probe:
                self.probes.gap = PROBE_FIRST
            self.probes.plain_run = 0
        # (the head consumed its queue of missed tokens when it decoded, kept tokens or not)
        self._drafted_last = decodes > 0
        self._missed = 0 if decodes else self._missed + n_accepted + 1
        self.asked = 0

    def _judge_stretch(self, stretch: tuple[int, float, float, float, float], n_drafted: int, t_verify: float) -> None:
        """After a draft one token longer than the best (its length n, expected tokens and
        seconds, its verify's predicted seconds, the best length's rate): had the verify been
        predicted at the seconds it took, would n have earned more than the best? Then the next
        comes PROBE_FIRST steps later (the calibration was wrong: a few timings correct it); else
        after twice the last gap, up to PROBE_MAX. (In a Batch the verify is the step's: texts
        that chose later add rows, which errs towards backing off.)"""
        n, gain, cost, predicted, best_tps = stretch
        if n_drafted != n or t_verify <= 0.0:  # (a short draft or an untimed verify: no verdict)
            return
        clock = self.probes
        if gain / max(1e-12, cost + t_verify - predicted) > best_tps:
            clock.stretch_gap = PROBE_FIRST
        else:
            clock.stretch_gap = min(PROBE_MAX, 2 * clock.stretch_gap)

    @property
    def catching_up(self) -> bool:
        """Whether the next draft also feeds the head tokens of plain steps (or the prompt): its
        time is then no measure of a draft token's cost."""
        return not (self._drafted_last and self._drafted_once)


def plan_batch(speculators, max_new: list[int | None]) -> list[int]:
    """Draft lengths of a Batch's step: the sequences choose in turn, each beside the rows (and
    expected tokens) of those that chose before and one plain row for each still to choose, so
    each pays what its rows add to the one shared verify, and what its draft adds to the head's
    decodes (one per draft position, shared by every text that drafts there). One text probes
    a step at most: probes that came together (the texts' probe clocks start alike) made steps
    of four extra rows where one extra row costs 17-25% of a 4-text step (the default model, 2
    threads, 2-core Zen 4), and the draft of a text that fed the head its missed tokens is no
    measure of a draft token, so no other text's draft of that step was timed either."""
    ks: list[int] = []
    rows, tokens, n = 0, 0.0, len(speculators)
    positions, probing = 0, False
    for i, (sp, m) in enumerate(zip(speculators, max_new)):
        later = n - i - 1
        policy = sp.policy
        if isinstance(policy, AutoPolicy):
            policy.positions_before, policy.may_probe, policy.n_texts = positions, not probing, n
            if n > 1 and not policy.trace:
                # A new text's probe clock starts here: the carried one counts one text's plain
                # steps, and texts that started together each took it and probed at once (4
                # texts of 48 tokens: 4 probes at the start of every generation, where the
                # budget allowed one in 30-55 steps of the batch).
                policy.probes.plain_run = 0
        k = sp.draft_length(m, rows_before=rows + later, tokens_before=tokens + later)
        ks.append(k)
        rows += k + 1
        positions = max(positions, k)
        trace = getattr(policy, "trace", None)
        chose = trace[-1] if trace and trace[-1].k == k else None
        tokens += chose.tokens if chose is not None else k + 1.0
        probing = probing or (k > 0 and chose is not None and chose.probe)
    return ks


def observe_batch_draft(costs: CostModel, decodes: list[tuple[int, object]], seconds: float, mode: str) -> None:
    """A Batch's drafting phase took these seconds; decodes: each text's (head decodes, policy).
    The texts share one head decode per draft position (CostModel.observe_batch_draft: a
    draft's first decode and its later ones priced apart). Where a drafting text also fed the
    head the tokens of its plain steps (a probe), the phase is no measure of draft tokens;
    where that text was the only one, what the phase took beyond its draft decodes is its
    catch-up (unlearned in a Batch, it stayed at its prior, 0.4 ms a token on the default model,
    where a probe's catch-up took 1 ms a token beside 3 other texts)."""
    drafting = [(n, p) for n, p in decodes if n]
    if not drafting:
        return
    counts = [n for n, _ in drafting]
    catching = [p for _, p in drafting if getattr(p, "catching_up", False)]
    if not catching:
        costs.observe_batch_draft(counts, seconds, mode)
        return
    p = catching[0]
    if len(catching) == 1 and isinstance(p, AutoPolicy) and p._missed and p._drafted_once:
        if costs.draft_timings(mode) >= 1:
            tokens = costs.batch_draft_seconds(counts, mode)
            costs.observe_catch_up(min(p._missed, CATCH_UP_KEEP), max(0.0, seconds - tokens), mode)


def make_policy(
    spec: SpecConfig,
    n_max: int,
    *,
    model=None,
    costs: CostModel | None = None,
    shared: bool = False,
    max_rows: int | None = None,
    greedy: bool = True,
    n_threads: int | None = None,
):
    """The policy a SpecConfig asks for (n_max: the longest draft the drafter allows; greedy:
    whether the generation samples, which changes what drafting costs; n_threads: the target
    context's, which the auto policy's costs are measured at)."""
    if spec.policy == "auto":
        return AutoPolicy(
            spec,
            n_max,
            model=model,
            costs=costs,
            shared=shared,
            max_rows=max_rows,
            mode="greedy" if greedy else "sample",
            n_threads=n_threads,
        )
    if spec.policy == "adaptive" and not spec.adaptive:
        spec = spec.model_copy(update={"adaptive": True})
    return DraftPolicy(spec, n_max)
