"""pymtp.policy: the auto draft-length policy (k in 0..K from costs and acceptance), its cost
model and calibration, alone, in a speculator and in a Batch.

Where a test checks a choice, the costs are a fixed table (CostModel.table, injected with
use_costs): decisions then depend on acceptance only, never on wall-clock noise. Calibration is
tested on its own."""

from __future__ import annotations

import itertools
import random

import pytest

import pymtp
from pymtp import SamplingConfig, SpecConfig
from pymtp.batch import Batch
from pymtp.bench.echo import EchoMaps, make_echo
from pymtp.config import GenerationConfig
from pymtp.drafter import Draft, Drafter
from pymtp.policy import (
    PROBE_MAX,
    AutoPolicy,
    CostModel,
    DraftPolicy,
    calibrate,
    costs_for,
    make_policy,
    use_costs,
)
from pymtp.speculator import MTPSpeculator

#: Verifying more rows costs little (a GPU-like table): drafting wins wherever drafts are accepted.
CHEAP = {1: 1.0, 2: 1.05, 3: 1.1, 4: 1.15, 5: 1.2, 8: 1.35, 16: 1.7, 32: 2.4}
#: A CPU-like table: each row adds 30% of one.
MID = {1: 1.0, 2: 1.3, 3: 1.6, 4: 1.9, 5: 2.2, 9: 3.4, 32: 10.3}
#: A 2-row verify costs 3x one row (a verify made artificially expensive): plain decoding wins
#: even at full acceptance.
DEAR = {1: 1.0, 2: 3.0, 3: 5.0, 5: 9.0, 32: 63.0}


def auto(n_draft=4, window=16, costs=None):
    spec = SpecConfig(policy="auto", n_draft=n_draft, adaptive_window=window)
    return AutoPolicy(spec, n_draft, costs=costs or CostModel.table(CHEAP, 0.02))


def run(policy, accept, steps):
    """Drive a policy for `steps` steps; accept(i) -> probability that draft position i is accepted
    at step... Returns the lengths chosen."""
    rng = random.Random(0)
    ks = []
    for step in range(steps):
        k = policy.next_length(100)
        n_acc = 0
        while n_acc < k and rng.random() < accept(step):
            n_acc += 1
        policy.update(k, n_acc, 0.0, 1.0)
        ks.append(k)
    return ks


def probes(ks):
    """The lengths of the runs of drafting steps in a list of chosen lengths."""
    runs = [len(list(g)) for drafting, g in itertools.groupby(ks, key=bool) if drafting]
    return runs


# ---- SpecConfig -------------------------------------------------------------------------------------


def test_auto_is_the_default_and_the_fixed_settings_stay():
    assert SpecConfig().policy == "auto"
    assert SpecConfig(n_draft=2).policy == "fixed"
    assert SpecConfig(p_min=0.5).policy == "fixed"
    assert SpecConfig(n_draft=4, adaptive=True).policy == "adaptive"
    assert SpecConfig(policy="auto", n_draft=6).policy == "auto"
    assert SpecConfig(**SpecConfig().model_dump()).policy == "auto"
    assert isinstance(make_policy(SpecConfig(), 3, costs=CostModel.table(CHEAP, 0.1)), AutoPolicy)
    assert isinstance(make_policy(SpecConfig(n_draft=2), 3), DraftPolicy)
    adaptive = make_policy(SpecConfig(policy="adaptive"), 3)
    assert isinstance(adaptive, DraftPolicy) and adaptive.config.adaptive
    with pytest.raises(ValueError, match="policy"):
        SpecConfig(policy="sometimes")


# ---- the choice, on synthetic acceptance ------------------------------------------------------------


def test_losing_settles_on_plain_steps_and_probes_rarely():
    p = auto()
    ks = run(p, lambda step: 0.0, 400)
    first_plain = ks.index(0)
    assert first_plain <= 12  # settles within a few steps (a cheap verify: ~10)
    probes = [i for i, k in enumerate(ks) if k and i > first_plain]
    assert all(k == 1 for k in ks[first_plain:] if k)  # only one-token probes from then on
    # backing off: at most one probe per PROBE_FIRST..PROBE_MAX plain steps, the gaps growing
    assert len(probes) <= 8
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    assert gaps == sorted(gaps) and gaps[-1] >= PROBE_MAX


def test_winning_settles_on_the_longest_draft():
    p = auto(n_draft=6)
    ks = run(p, lambda step: 1.0, 60)
    assert ks[-40:] == [6] * 40


def test_expensive_verify_means_plain_even_at_full_acceptance():
    p = auto(costs=CostModel.table(DEAR, 0.02))
    ks = run(p, lambda step: 1.0, 200)
    assert sum(1 for k in ks[10:] if k) <= 12  # probes only
    assert all(k <= 1 for k in ks[10:])


def test_a_dip_under_the_break_even_does_not_keep_plain_steps():
    """Drafting earns 8% more than plain steps (two-token drafts at 0.7 acceptance; the break-even
    rate is about 0.61), but the estimate, with its 16-step window, dips under 0.61 now and then.
    Plain steps then froze it, and a probe, counted once, moved it by 1/16: plain steps stayed, on
    73% of the steps. A probe after plain steps counts up to twice now."""
    table = {1: 1.07, 2: 1.54, 3: 1.80, 4: 2.20, 5: 2.56}  # echo-70's verify, 1 thread (x 10 ms)
    c_draft, rate = 0.18, 0.7

    def true_tps(k):
        return sum(rate**i for i in range(k + 1)) / (table[k + 1] + k * c_draft)

    ks = []
    for seed in range(10):
        p = auto(costs=CostModel.table(table, c_draft))
        rng = random.Random(seed)
        for step in range(400):
            k = p.next_length(100)
            n_acc = 0
            while n_acc < k and rng.random() < rate:
                n_acc += 1
            p.update(k, n_acc, 0.0, 1.0)
            if step >= 30:
                ks.append(k)
    best = max(true_tps(k) for k in range(5))
    assert true_tps(0) < 0.93 * best
    assert ks.count(0) / len(ks) < 0.5
    assert sum(true_tps(k) for k in ks) / len(ks) > 0.95 * best


def test_probes_that_go_as_expected_back_off():
    """Plain steps win at acceptance 0.7 with a dear verify: probes accept some tokens, as the
    estimate says they would; that is no news, so they back off (they do not come every few
    steps as after a surprise)."""
    # (costs never timed: only the backoff spaces the probes)
    p = AutoPolicy(SpecConfig(policy="auto", n_draft=4), 4, costs=CostModel(DEAR, 0.02), shared=True)
    ks = run(p, lambda step: 0.7, 400)
    assert len(probes(ks[20:])) <= 12
    assert all(n <= 2 for n in probes(ks[20:]))  # a probe and at most one draft to time it


def test_finds_long_drafts_where_only_long_drafts_pay():
    """A verify whose second row is dear and later rows nearly free (a kernel switch at 2 rows):
    a one-token draft loses even at full acceptance, four tokens win. From the prior (plain steps
    win) the probes draft the best length but 0, so the policy finds the long drafts."""
    jump = {1: 1.0, 2: 2.5, 3: 2.6, 4: 2.7, 5: 2.8}
    p = auto(costs=CostModel.table(jump, 0.05))
    assert p.next_length(0) == 0  # at the prior acceptance, plain wins
    ks = run(p, lambda step: 1.0, 100)
    assert ks[-50:] == [4] * 50


def test_a_new_generation_starts_from_the_last_ones_estimates(echo):
    sess, _ = echo[1.0]
    spec = SpecConfig(policy="auto", n_draft=4)
    first = AutoPolicy(spec, 4, model=sess.model, costs=CostModel.table(CHEAP, 0.02))
    run(first, lambda step: 1.0, 40)
    second = AutoPolicy(spec, 4, model=sess.model, costs=CostModel.table(CHEAP, 0.02))
    # the evidence carried is capped at half a window (adaptive_window 16: 8 drafts)
    assert first.acceptance.reached[0] > 8.5
    assert second.acceptance.reached == pytest.approx([8.0] * 4)
    assert second.acceptance.rates()[0] > 0.9
    other = AutoPolicy(spec, 4, costs=CostModel.table(CHEAP, 0.02))  # no model: the prior
    assert other.acceptance.rates()[0] == pytest.approx(0.6)


def test_short_generations_keep_their_evidence_and_probe_clock(echo):
    """Many short generations: the carried evidence does not dwindle (halving it each time left a
    few counts: 0.85 after ten generations of two drafts), and a backed-off probe clock goes on
    where the last generation left it (not a probe at the first gap in every generation)."""
    sess, _ = echo[1.0]
    spec = SpecConfig(policy="auto", n_draft=3)
    for _ in range(10):
        p = AutoPolicy(spec, 3, model=sess.model, costs=CostModel.table(CHEAP, 0.02))
        run(p, lambda step: 1.0, 2)
    assert AutoPolicy(spec, 3, model=sess.model, costs=CostModel.table(CHEAP, 0.02)).acceptance.rates()[0] > 0.95

    spec = SpecConfig(policy="auto", n_draft=2)
    losing = AutoPolicy(spec, 2, model=sess.model, costs=CostModel.table(DEAR, 0.02))
    run(losing, lambda step: 0.0, 300)
    assert losing.probes.gap == PROBE_MAX
    later = AutoPolicy(spec, 2, model=sess.model, costs=CostModel.table(DEAR, 0.02))
    ks = run(later, lambda step: 0.0, 30)
    assert ks == [0] * 30


def test_probes_time_the_draft_without_the_heads_catch_up():
    """A calibration's guess of a draft token's cost is 20x too dear, so plain steps seem to win.
    A probe's draft also feeds the head every token it missed (here 0.05 s each): no measure of
    a draft token. The step after a probe drafts once more, timing a draft token alone; the
    policy then finds that drafting wins (the guess stayed for good when probes were not
    re-timed)."""
    table = {1: 1.0, 2: 1.3, 3: 1.6, 4: 1.9, 5: 2.2}
    p = auto(costs=CostModel(table, 1.0))  # learns; a draft token really costs 0.05 s
    rng = random.Random(0)
    ks, missed = [], 1
    for _ in range(120):
        k = p.next_length(0)
        n_acc = 0
        while n_acc < k and rng.random() < 0.9:
            n_acc += 1
        t_draft = 0.05 * k + 0.05 * missed if k else 0.0
        missed = n_acc + 1 if k else missed + 1
        p.update(k, n_acc, t_draft, table[k + 1])
        ks.append(k)
    assert ks[:7] == [0] * 7  # the guess: plain steps win
    assert p.costs.draft_cost() == pytest.approx(0.05 + 0.05 * 1.9 / 4, rel=0.5)
    assert min(ks[30:]) >= 1 and sorted(ks[30:])[45] >= 3


def test_plain_steps_carry_the_heads_catch_up():
    """Each plain step's token is fed to the head at the next draft (0.08 s a token here, on
    steps of 1 s): plain steps cost that much more. At an acceptance where drafting and plain
    steps are near even, plain steps win without it and drafts with it (plain steps, then a
    probe paying for all of them, were cheaper than they are)."""
    table = {1: 1.0, 2: 1.6, 3: 2.2, 4: 2.8}

    def choice(catch_up):
        p = auto(n_draft=3, costs=CostModel.table(table, 0.05, catch_up=catch_up))
        p.acceptance.count(0, 0)  # (no evidence: the prior's rate at every position)
        gain, cost = p.expected(100)
        return p.next_length(100), gain[1] / cost[1] / (gain[0] / cost[0])

    k, edge = choice(0.0)
    assert k == 0 and 0.95 < edge < 1.0  # a draft earns 1-5% less than a plain step
    k, edge = choice(0.08)
    assert k >= 1 and edge > 1.0


def test_the_heads_catch_up_is_learned_from_drafts_after_plain_steps():
    """A draft after 5 plain steps takes 0.25 s more than one after a draft: 0.05 s per token
    the head missed, learned beside the cost of a draft token (not taken for it)."""
    table = {1: 1.0, 2: 1.3, 3: 1.6, 4: 1.9}
    p = auto(n_draft=3, costs=CostModel(table, 0.1))
    assert p.costs.catch_up() == 0.0

    def step(k, n_acc, t_draft):
        p.next_length(100)
        p.asked = k
        p.update(k, n_acc, t_draft, table[k + 1])

    for _ in range(4):
        step(2, 2, 0.2)  # 0.1 s per draft token
    for missed in (5, 3):
        for _ in range(missed):
            step(0, 0, 0.0)
        step(2, 2, 0.2 + 0.05 * missed)
    assert p.costs.draft_cost() == pytest.approx(0.1, rel=0.05)
    assert p.costs.catch_up() == pytest.approx(0.05, rel=0.05)


def test_the_head_is_fed_only_the_last_plain_tokens_and_priced_so():
    """After a run of plain steps the head is fed only the last CATCH_UP_KEEP tokens they emitted
    (pymtp.mtp_drafter): a draft after 20 plain steps that took 0.05 s more per fed token teaches
    0.05 s per token (not per plain step), and a plain step carries the catch-up of its token
    only in the share of plain steps whose token is fed: all of them at a gap between probes of
    at most CATCH_UP_KEEP, fewer at longer gaps."""
    from pymtp.costs import CATCH_UP_KEEP

    table = {1: 1.0, 2: 1.3, 3: 1.6, 4: 1.9}
    p = auto(n_draft=3, costs=CostModel(table, 0.1))

    def step(k, n_acc, t_draft):
        p.next_length(100)
        p.asked = k
        p.update(k, n_acc, t_draft, table[k + 1])

    for _ in range(4):
        step(2, 2, 0.2)
    for _ in range(20):
        step(0, 0, 0.0)
    step(2, 2, 0.2 + 0.05 * CATCH_UP_KEEP)
    assert p.costs.catch_up() == pytest.approx(0.05, rel=0.05)

    fixed = auto(n_draft=3, costs=CostModel.table(table, 0.05, catch_up=0.4))

    def plain_cost(gap):
        fixed.probes.gap = gap
        return fixed.expected(100)[1][0] - table[1]

    assert plain_cost(CATCH_UP_KEEP) == pytest.approx(0.4)
    assert plain_cost(4 * CATCH_UP_KEEP) == pytest.approx(0.1)


def test_a_longer_draft_that_the_calibration_made_too_dear_is_tried():
    """The calibration says 5 rows cost 4x one row (a burst of load during it); they cost 2.2x.
    At full acceptance three-token drafts then seem best, and a four-token draft's verify would
    never be timed again; drafting one token more now and then times it, and the policy moves
    to four-token drafts."""
    truth = {1: 1.0, 2: 1.3, 3: 1.6, 4: 1.9, 5: 2.2}
    p = auto(costs=CostModel({**truth, 5: 4.0}, 0.02))
    ks = []
    for _ in range(300):
        k = p.next_length(0)
        p.update(k, k, 0.02 * k, truth[k + 1])
        ks.append(k)
    assert ks[2:7] == [3] * 5
    assert ks[-50:] == [4] * 50


def test_longer_drafts_that_lose_are_tried_rarely_once_timed():
    """Drafts one token longer than the best time the longer verify; once it was timed often
    (its cost learned), they come every PROBE_MAX steps, not every PROBE_FIRST for good."""
    truth = {1: 1.0, 2: 1.3, 3: 1.6, 4: 1.9, 5: 3.5}  # a fifth row costs 1.6 rows: k = 4 loses
    p = auto(costs=CostModel(truth, 0.02))
    ks = []
    for _ in range(600):
        k = p.next_length(0)
        p.update(k, k, 0.02 * k, truth[k + 1])
        ks.append(k)
    assert sorted(ks[-300:])[150] == 3
    assert ks[-300:].count(4) <= 300 // PROBE_MAX + 1


@pytest.mark.parametrize("rate", [0.7, 0.8])
def test_near_a_tie_the_length_holds(rate):
    """Where two draft lengths earn within a few percent of each other, the estimates' noise
    (each accepted or rejected token) made the best length flip every few steps, to whichever
    the noise favoured (87 flips in 500 steps). It holds now, at no real cost: the lengths
    chosen earn at least 97% of the best's (true) expected tokens per second."""
    c_draft = 0.05
    ks = run(auto(costs=CostModel.table(MID, c_draft)), lambda step: rate, 600)[100:]
    flips = sum(1 for a, b in itertools.pairwise(ks) if a != b and a and b)

    def true_tps(k):
        return sum(rate**i for i in range(k + 1)) / (MID[k + 1] + k * c_draft)

    best = max(true_tps(k) for k in range(5))
    assert flips <= 30
    assert sum(true_tps(k) for k in ks) / len(ks) >= 0.97 * best


def test_length_follows_acceptance_and_costs():
    # acceptance 0.7 per position: with a cheap verify a long draft pays, with a dearer one less
    cheap = run(auto(n_draft=8), lambda step: 0.7, 300)
    dear = run(auto(n_draft=8, costs=CostModel.table(MID, 0.05)), lambda step: 0.7, 300)
    assert sorted(cheap[100:])[100] >= 3  # median
    assert 1 <= sorted(dear[100:])[100] < sorted(cheap[100:])[100]


def test_follows_a_change_mid_text():
    """Acceptance drops from 1 to 0 at step 150 and comes back at step 400: the policy goes to
    plain steps within a few steps, and back to long drafts within a bounded number of steps."""
    p = auto(n_draft=4, costs=CostModel.table(MID, 0.02))
    ks = run(p, lambda step: 1.0 if step < 150 or step >= 400 else 0.0, 600)
    assert ks[100:150] == [4] * 50
    assert ks[170:400].count(0) >= 200 and all(k <= 1 for k in ks[170:400])
    back = next(i for i in range(400, 600) if ks[i] == 4 and ks[i + 1] == 4)
    assert back - 400 <= 100
    assert ks[-50:] == [4] * 50


def test_a_batch_pays_the_rows_it_adds():
    """The shared verify: a sequence's step is judged with the other rows of the batch (and the
    tokens they yield), so with a verify whose rows grow dearer it drafts shorter beside 8 rows
    than alone, and with one whose rows grow cheaper at least as long."""

    def trained(table):
        p = auto(n_draft=4, costs=CostModel.table(table, 0.0))
        for _ in range(30):
            p.update(1, 1, 0.0, 1.0)  # position 0 always accepted, later ones unseen
        return p

    convex = {1: 1.0, 2: 1.2, 3: 1.5, 4: 1.9, 5: 2.4, 9: 5.0, 14: 10.0}
    p = trained(convex)
    assert p.next_length(10, rows_before=8, tokens_before=8.0) < p.next_length(10)
    q = trained(CHEAP)
    assert q.next_length(10, rows_before=8, tokens_before=8.0) >= q.next_length(10) == 4
    gain, cost = q.expected(10, rows_before=8, tokens_before=8.0)
    c = q.costs
    assert cost[2] == pytest.approx(c.verify(11, 10) + 2 * c.c_draft) and gain[0] == 9.0


def run_with_cut(policy, kept, accept, steps, t_decode=0.0, unsure_accept=0.1, emitted=None):
    """Drive a policy whose drafter ends a draft where the confidence cut drops a token. The head
    is confident (probability 0.99) of a position with probability kept(step), unsure (0.01)
    otherwise; a confident token is accepted with probability `accept`, an unsure one with
    `unsure_accept`.
    Under a cut (policy.p_min > 0) the draft ends at the first unsure token; a probe (no cut)
    drafts every position and reports the confidences. Each head decode (the dropped token's
    included) takes t_decode seconds. Returns the lengths chosen (emitted: gets each step's
    tokens)."""
    rng = random.Random(1)
    ks = []
    for step in range(steps):
        k = policy.next_length(100)
        conf = [0.99 if rng.random() < kept(step) else 0.01 for _ in range(k)]
        n = next((i for i, c in enumerate(conf) if c < policy.p_min), k)
        n_acc = 0
        while n_acc < n and rng.random() < (accept if conf[n_acc] > 0.5 else unsure_accept):
            n_acc += 1
        decodes = min(k, n + 1)
        policy.update(n, n_acc, t_decode * decodes, MID[n + 1], confidence=conf[:n])
        ks.append(k)
        if emitted is not None:
            emitted.append(n_acc + 1)
    return ks


def test_drafts_the_cut_drops_count_against_drafting():
    """A head whose confident tokens are accepted (90%) but which the cut lets through only 30%
    of the time: a one-token draft then yields 0.27 tokens and pays a head decode every step and
    a verify row 30% of the time, which loses to plain steps. The estimate counted drafted tokens
    only (0.9 accepted): drafting seemed to win, and every dropped draft paid a decode for
    nothing. Where the cut keeps most tokens (90%), drafting still wins."""
    losing = auto(costs=CostModel.table(MID, 0.25))
    ks = run_with_cut(losing, lambda step: 0.3, accept=0.9, steps=300)
    assert ks[50:].count(0) >= 0.8 * 250, ks
    winning = auto(costs=CostModel.table(MID, 0.25))
    ks = run_with_cut(winning, lambda step: 0.9, accept=0.9, steps=300)
    assert ks[50:].count(0) <= 0.1 * 250 and sum(ks[50:]) >= 250, ks


def test_probes_find_that_the_cut_keeps_tokens_again():
    """The head is unsure of most tokens for 200 steps (the cut keeps 20%: plain steps win), then
    sure of nearly all. Only probes draft meanwhile, and they draft without a cut: the keep rate
    learns from what the cut would have kept of them, so drafting resumes. (Learned from cut
    drafts alone, the keep rate stayed at its low for good.)"""
    p = auto(costs=CostModel.table(MID, 0.25))
    ks = run_with_cut(p, lambda step: 0.2 if step < 200 else 0.97, accept=0.9, steps=500)
    assert ks[100:200].count(0) >= 80, ks
    assert ks[-100:].count(0) <= 10, ks


def test_a_head_that_understates_drafts_without_the_cut():
    """The head's probability understates its tokens' chance (the deep variant's): the cut keeps
    30% of them, yet those it would drop are accepted 85% of the time. Under the cut drafting
    loses to plain steps; drafting every token wins, and the probes (drafts without a cut) show
    it: the policy drafts long drafts without the cut, about 3.7 tokens a step. (With the cut
    always on, about 1.4.) Where the doubted tokens are seldom accepted (10%), the cut stays."""
    p = auto(costs=CostModel.table(MID, 0.05))
    emitted: list[int] = []
    ks = run_with_cut(p, lambda step: 0.3, accept=0.95, steps=300, unsure_accept=0.85, emitted=emitted)
    assert sum(k >= 2 for k in ks[100:]) >= 0.9 * 200, ks
    assert sum(emitted[100:]) / 200 > 3.0
    assert not p.cutting and p.p_min == 0.0
    q = auto(costs=CostModel.table(MID, 0.05))
    run_with_cut(q, lambda step: 0.8, accept=0.95, steps=300, unsure_accept=0.1)
    assert q.cutting and q.p_min > 0.0


def test_a_draft_token_is_timed_per_head_decode():
    """The cut drops the second of two drafted tokens in every step: the head decoded two
    positions (0.05 s each), one token was kept. Counting kept tokens only, a draft token seemed
    to cost twice its 0.05 s."""
    p = AutoPolicy(SpecConfig(policy="auto", n_draft=2), 2, costs=CostModel(CHEAP, 0.05))
    for _ in range(60):
        k = p.next_length(100)
        n = min(k, 1)
        p.update(n, n, 0.05 * (min(k, n + 1) if k else 0), CHEAP[n + 1])
    assert p.costs.draft_cost() == pytest.approx(0.05, rel=0.1)


def test_trace_predicted_and_measured():
    p = auto()
    p.next_length(0)
    p.update(4, 2, 0.001, 0.002)
    (choice,) = p.trace
    assert choice.k == 4 and not choice.probe and choice.predicted_tps > 0 and choice.measured_tps > 0


# ---- costs ------------------------------------------------------------------------------------------


def test_cost_model_interpolates_learns_and_counts_positions():
    cm = CostModel({1: 1.0, 3: 2.0}, c_draft=0.1, attn=0.001)
    assert cm.verify(2) == pytest.approx(1.5)
    assert cm.verify(5) == pytest.approx(3.0)  # the last slope, extrapolated
    assert cm.verify(2, pos=1000) == pytest.approx(1.5 + 2.0)
    for _ in range(50):
        cm.observe_verify(2, 0, 3.0)  # measured twice the calibration
        cm.observe_draft(2, 0.4)
    assert cm.verify(2) == pytest.approx(3.0, rel=0.1)
    assert 1.0 < cm.verify(1) < 2.0 * 1.05  # other row counts follow the overall ratio, shrunk
    assert cm.c_draft == pytest.approx(0.2, rel=0.05)
    frozen = CostModel.table({1: 1.0}, 0.1)
    frozen.observe_verify(1, 0, 10.0)
    assert frozen.verify(1) == 1.0
    with pytest.raises(ValueError, match="1 row"):
        CostModel({2: 1.0}, 0.1)


def test_costs_follow_the_load_on_every_row_count():
    """Verifies of 5 rows and of 1 row timed at the calibration's speed, then the machine slows
    to 2x while only 1-row verifies are timed (plain steps): the 5-row prediction follows (a
    per-row-count mean kept it near 1x, so drafting looked cheap, or dear in the opposite case,
    for good). A single preempted step (10x) moves nothing; a draft timed under the load counts
    relative to it."""
    cm = CostModel({1: 1.0, 5: 3.0}, c_draft=0.5)
    for _ in range(30):
        cm.observe_verify(5, 0, 3.0)
        cm.observe_draft(4, 4 * 0.2)
    for _ in range(10):
        cm.observe_verify(1, 0, 1.0)
    assert cm.verify(5) == pytest.approx(3.0, rel=0.02) and cm.c_draft == pytest.approx(0.2, rel=0.02)
    for _ in range(30):
        cm.observe_verify(1, 0, 2.0)
    assert cm.verify(1) == pytest.approx(2.0, rel=0.05)
    assert cm.verify(5) == pytest.approx(6.0, rel=0.05)
    assert cm.c_draft == pytest.approx(0.4, rel=0.05)  # the draft slows with the machine
    cm.observe_verify(1, 0, 20.0)
    assert cm.verify(1) == pytest.approx(2.0, rel=0.05) and cm.verify(5) == pytest.approx(6.0, rel=0.05)
    # a calibration whose 5-row time is 20% off: probes amid plain steps teach the contrast
    cm = CostModel({1: 1.0, 5: 3.0}, c_draft=0.5)
    for i in range(200):
        cm.observe_verify(5, 0, 3.6) if i % 8 == 7 else cm.observe_verify(1, 0, 1.0)
    assert cm.verify(1) == pytest.approx(1.0, rel=0.03) and cm.verify(5) == pytest.approx(3.6, rel=0.03)


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    """agree -> (loaded session, maps) for heads that always / never agree (SMALL_SHAPE, F16)."""
    d = tmp_path_factory.mktemp("echo_policy")
    out = {}
    for a in (1.0, 0.0):
        path = make_echo(d / f"echo-{a}.gguf", a)
        out[a] = (pymtp.load(path, n_ctx=1024), EchoMaps.read(path))
    yield out
    for s, _ in out.values():
        use_costs(s.model, None)
        s.close()


def test_calibration_is_quick_and_cached(echo):
    import time

    sess, _ = echo[1.0]
    t = time.perf_counter()
    cm = calibrate(sess.model, 5)
    assert time.perf_counter() - t < 2.0  # budget 0.4 s, a loaded CI machine allowed
    rows = cm.describe()["rows"]
    assert rows.keys() >= {1, 2, 5} and all(v > 0 for v in rows.values())
    assert cm.attn >= 0 and cm.c_draft > 0
    use_costs(sess.model, None)
    first = costs_for(sess.model, 5)
    assert costs_for(sess.model, 5) is first  # once per model and thread count
    use_costs(sess.model, None)


def test_calibration_measures_the_most_rows_whatever_the_budget(echo):
    """One row, two rows and the most rows are timed even when the budget is spent (on a large
    model it held one and two rows, and the rest, extrapolated, came out far too cheap)."""
    sess, _ = echo[1.0]
    rows = calibrate(sess.model, 4, budget=0.0).describe()["rows"]
    assert rows.keys() >= {1, 2, 4}


def test_costs_are_calibrated_at_the_sessions_thread_count(echo, monkeypatch):
    """A session decoding with 3 threads gets costs measured with 3 threads (not the default
    thread count's, which may be another machine's worth of cores)."""
    import pymtp.costs

    asked: list[int | None] = []

    def fake(model, max_rows, *, n_threads=None, **_):
        asked.append(n_threads)
        return CostModel.table({1: 0.01, 2: 0.011, 3: 0.012, 4: 0.013, 5: 0.014}, 0.002)

    monkeypatch.setattr(pymtp.costs, "calibrate", fake)
    path = echo[1.0][0].model.path
    with pymtp.load(path, n_ctx=256, n_threads=3) as sess:
        use_costs(sess.model, None, n_threads=3)
        try:
            pymtp.generate("def f(x):", sess, max_tokens=8, ignore_eos=True, speculative=SpecConfig(policy="auto"))
        finally:
            use_costs(sess.model, None, n_threads=3)
    assert asked and set(asked) == {3}


# ---- in a speculator, end to end ---------------------------------------------------------------------


def generate(sess, table, n_draft=4, max_tokens=120, prompt="def f(x):"):
    use_costs(sess.model, CostModel.table(table, 0.02))
    try:
        return pymtp.generate(
            prompt, sess, max_tokens=max_tokens, ignore_eos=True, speculative=SpecConfig(policy="auto", n_draft=n_draft)
        )
    finally:
        use_costs(sess.model, None)


def test_a_head_that_never_agrees_gives_plain_steps_and_plain_text(echo):
    sess, maps = echo[0.0]
    r = generate(sess, CHEAP, max_tokens=150)
    assert r.tokens == maps.greedy(r.prompt_tokens[-1], 150)  # lossless
    ks = r.stats.k_chosen
    first = ks.index(0)
    assert first <= 12 and sum(1 for k in ks[first:] if k) <= 5 and max(ks[first:]) <= 1
    assert r.stats.n_accepted == 0 and len(r.stats.tps_predicted) == r.stats.n_steps


def test_a_head_that_always_agrees_drafts_long(echo):
    sess, maps = echo[1.0]
    r = generate(sess, CHEAP, n_draft=6, max_tokens=150)
    assert r.tokens == maps.greedy(r.prompt_tokens[-1], 150)
    assert r.stats.k_chosen[3:-3] == [6] * (len(r.stats.k_chosen) - 6)
    assert r.stats.n_steps < 150 / 5


def test_an_expensive_verify_gives_plain_steps_at_full_acceptance(echo):
    sess, maps = echo[1.0]
    r = generate(sess, DEAR, max_tokens=150)
    assert r.tokens == maps.greedy(r.prompt_tokens[-1], 150)
    ks = r.stats.k_chosen
    assert ks[10:].count(0) >= len(ks[10:]) - 12


class SwitchingDrafter(Drafter):
    """Proposes the echo text's true continuation (always accepted) or a wrong one (never), switching
    at given lengths of the text: acceptance that changes mid-text."""

    def __init__(self, maps: EchoMaps, right_until: int, right_from: int, n_vocab: int) -> None:
        self.maps, self.right_until, self.right_from, self.n_vocab = maps, right_until, right_from, n_vocab

    def propose(self, last_token, n_past, k, sampler, history, p_min=0.0):
        toks = self.maps.greedy(last_token, k)
        if self.right_until <= len(history) < self.right_from:
            toks = [(t + 1) % self.n_vocab if i == 0 else t for i, t in enumerate(toks)]
        return Draft(tokens=toks, confidence=[1.0] * k)


def test_follows_acceptance_that_changes_mid_text(echo):
    sess, maps = echo[1.0]
    use_costs(sess.model, CostModel.table(MID, 0.02))
    try:
        prompt = sess.tokenize("def f(x):")
        n0 = len(prompt)
        drafter = SwitchingDrafter(maps, n0 + 150, n0 + 350, sess.model.n_vocab)
        sp = MTPSpeculator(sess.target, drafter, SamplingConfig(), SpecConfig(policy="auto", n_draft=4))
        sp.start(prompt)
        lengths = []  # (text length before the step, k chosen)
        while len(sp.tokens) < n0 + 600:
            before = len(sp.tokens)
            sp.step()
            lengths.append((before, sp.stats.k_chosen[-1]))
    finally:
        use_costs(sess.model, None)
    assert sp.tokens[n0:] == maps.greedy(prompt[-1], len(sp.tokens) - n0)
    good1 = [k for n, k in lengths if n0 + 40 <= n < n0 + 150]
    bad = [k for n, k in lengths if n0 + 170 <= n < n0 + 350]
    good2 = [k for n, k in lengths if n >= n0 + 450]
    assert good1 and all(k == 4 for k in good1)
    assert bad.count(0) >= len(bad) - 10 and max(bad) <= 1  # plain steps, a few probes
    assert good2 and all(k == 4 for k in good2)  # back to long drafts within 100 tokens


def test_in_a_batch(echo):
    """The same in a Batch: the never-agreeing head settles on plain steps, the always-agreeing one
    on long drafts, both lossless; each sequence's choice is in its stats."""
    for agree, table, want in ((0.0, MID, 0), (1.0, CHEAP, 4), (1.0, DEAR, 0)):
        sess, maps = echo[agree]
        use_costs(sess.model, CostModel.table(table, 0.02))
        try:
            with Batch(sess, n_seq=3, n_ctx=512, spec=SpecConfig(policy="auto", n_draft=4)) as b:
                items = [
                    b.add(sess.tokenize(p), limits=GenerationConfig(max_tokens=120, ignore_eos=True))
                    for p in ("def f(x):", "the quick brown fox", "import os\n")
                ]
                b.run()
        finally:
            use_costs(sess.model, None)
        for it in items:
            r = it.result
            assert r.tokens == maps.greedy(it.prompt[-1], 120)
            ks = r.stats.k_chosen
            tail = ks[10:-2]
            if want:
                assert tail.count(want) >= len(tail) - 1, (agree, ks)
            else:  # plain steps and probes (accepted probes come every PROBE_MIN steps at most)
                assert tail.count(0) >= 0.75 * len(tail) and max(tail) <= 1, (agree, table, ks)


def test_confidence_cut_follows_the_cost_of_a_row():
    """The cut: a token is worth its verify row when its head probability reaches the tokens the
    step's rate earns in that row's seconds: higher where rows cost more, none on probes, and a
    p_min the user gives stays."""

    def cut(table, **kw):
        p = AutoPolicy(SpecConfig(policy="auto", n_draft=4, **kw), 4, costs=CostModel.table(table, 0.02))
        run(p, lambda step: 0.8, 50)
        k = p.next_length(100)
        return k, p.p_min

    k_mid, cut_mid = cut(MID)
    k_cheap, cut_cheap = cut(CHEAP)
    assert k_mid > 0 and k_cheap > 0 and 0 < cut_cheap < cut_mid < 0.9
    assert cut(MID, p_min=0.3)[1] == 0.3
    p = auto(costs=CostModel.table(DEAR, 0.02))  # plain steps and probes: no cut
    run(p, lambda step: 1.0, 100)
    assert p.trace[-1].k <= 1 and p.p_min == 0.0


def test_stats_show_and_plot_the_choice():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pymtp.display import plot_policy, stats_html
    from pymtp.policy import Choice
    from pymtp.stats import SpecStats

    s = SpecStats()
    for k, pred, meas in ((3, 100.0, 90.0), (0, 50.0, 55.0), (1, 60.0, 40.0)):
        s.record_choice(Choice(k, k == 1, pred, measured_tps=meas))
    assert (s.k_chosen, s.tps_predicted, s.tps_measured) == ([3, 0, 1], [100.0, 50.0, 60.0], [90.0, 55.0, 40.0])
    assert "auto policy" in stats_html(s) and "70.0 / 61.7" in stats_html(s)
    fig = plot_policy(s)
    ax, rate = fig.axes
    assert list(ax.get_lines()[0].get_ydata()) == [3, 0, 1]
    assert [list(x.get_ydata()) for x in rate.get_lines()] == [[100.0, 50.0, 60.0], [90.0, 55.0, 40.0]]
    plt.close(fig)
    fig = plot_policy(SpecStats())
    assert "no auto-policy steps" in fig.axes[0].texts[0].get_text()
    plt.close(fig)


def test_the_server_and_the_cli_take_a_policy(echo):
    """A request's policy (or the server's default, --policy) reaches its SpecConfig; the CLI's
    --policy too; n_draft alone still means fixed."""
    from pymtp.cli import build_parser
    from pymtp.cli_options import flat_from_args
    from pymtp.server.jobs import JobMaker
    from pymtp.server.schemas import CompletionRequest

    sess, _ = echo[1.0]
    jobs = JobMaker(sess, "echo")
    spec = lambda maker, **kw: maker.completion(CompletionRequest(prompt="x", **kw))[0].request.spec
    assert spec(jobs).policy == "auto"
    assert spec(jobs, n_draft=2).policy == "fixed"
    assert spec(jobs, n_draft=2, policy="auto").policy == "auto"
    assert spec(JobMaker(sess, "echo", defaults={"policy": "adaptive"})).policy == "adaptive"
    with pytest.raises(Exception, match="policy"):
        CompletionRequest(prompt="x", policy="never")
    args = build_parser().parse_args(["generate", "--policy", "fixed", "hi"])
    assert flat_from_args(args)["policy"] == "fixed"
    serve = build_parser().parse_args(["serve", "--policy", "auto"])
    assert serve.policy == "auto"
