"""pymtp.policy in a Batch (plan_batch): the texts share one verify and the head's draft decodes,
and one probe clock's budget. Fake speculators drive the policies as MTPSpeculator.draft_length
does; the costs are those the default model measured on the 2-core Zen 4 at 2 threads (seconds):
4 plain rows 20 ms, each row more 2 ms, a lone draft token 1.4 ms, 4 texts drafting a token each
3.2 ms (issue #29, docs/performance/drafting.md, round 6)."""

from __future__ import annotations

import pytest

from pymtp import SpecConfig
from pymtp.costs import CostModel
from pymtp.policy import AutoPolicy, observe_batch_draft, plan_batch

ROWS = {1: 0.0133, 2: 0.0133, 3: 0.016, 4: 0.020, 5: 0.022, 6: 0.024, 8: 0.028, 16: 0.044}
LONE, FOUR = 0.0014, 0.0032


class FakeText:
    """What plan_batch asks of a speculator."""

    def __init__(self, policy: AutoPolicy) -> None:
        self.policy = policy

    def draft_length(self, max_new, rows_before=0, tokens_before=0.0):
        k = self.policy.next_length(100, rows_before, tokens_before)
        self.policy.asked = k
        return k


def batch_costs() -> CostModel:
    """A CostModel that learned the drafting phase from a Batch's steps: lone drafts, then steps
    where 4 texts drafted one token each (one head decode for all)."""
    costs = CostModel(ROWS, LONE)
    for _ in range(4):
        costs.observe_draft(1, LONE, calls=1)
    for _ in range(20):
        costs.observe_draft(4, FOUR, calls=1)
    return costs


def texts(costs, acceptance, n=4):
    out = []
    for _ in range(n):
        p = AutoPolicy(SpecConfig(policy="auto", n_draft=1), 1, costs=costs, shared=True)
        for est in (p.acceptance, p.acceptance_all):
            est.reached, est.accepted = [40.0], [40.0 * acceptance]
        out.append(FakeText(p))
    return out


def test_a_draft_token_beside_other_texts_costs_a_share_of_a_lone_one():
    """Learned per token, 4 texts drafting together made a draft token look 0.8 ms, and a text
    drafting alone beside plain texts was priced at about half what it costs."""
    costs = batch_costs()
    assert costs.draft_cost() == pytest.approx(LONE, rel=0.05)
    assert costs.draft_share() == pytest.approx((FOUR / LONE - 1) / 3, rel=0.1)


def test_a_batch_where_drafting_loses_plans_plain_steps():
    """At acceptance 0.62, one text's row and lone draft token (2 + 1.4 ms) cost more than the
    0.62 tokens it brings are worth beside 4 texts' 20 ms step: every text decodes plainly.
    (Priced at the per-token mean of shared drafts, the first text drafted.)"""
    ts = texts(batch_costs(), 0.62)
    for _ in range(5):
        assert plan_batch(ts, [None] * 4) == [0, 0, 0, 0]
        for t in ts:
            t.policy.update(0, 0, 0.0, ROWS[4])


def test_a_batch_where_drafting_pays_drafts():
    """At acceptance 0.95 each text's token pays its row, and the later texts' ride on the first
    text's head decode: every text drafts."""
    ts = texts(batch_costs(), 0.95)
    assert plan_batch(ts, [None] * 4) == [1, 1, 1, 1]


def test_one_probe_a_step_and_the_texts_share_the_budget():
    """Four texts at plain steps whose probe clocks start alike (a new generation takes the last
    one's) probed in the same step, and each spent the whole probe budget: one text probes a
    step at most, and the batch probes about as often as one text alone would."""
    costs = CostModel.table(ROWS, LONE)
    ts = texts(costs, 0.3)
    assert plan_batch(ts, [None] * 4) == [0, 0, 0, 0]
    for t in ts:
        t.policy.update(0, 0, 0.0, ROWS[4])
        t.policy.probes.plain_run = 100  # all due at once
    plans = []
    for _ in range(200):
        ks = plan_batch(ts, [None] * 4)
        plans.append(ks)
        for t, k in zip(ts, ks):
            t.policy.update(k, 0, LONE * k, ROWS[4 + sum(ks)] if 4 + sum(ks) in ROWS else 0.03)
    assert all(sum(1 for k in ks if k) <= 1 for ks in plans)
    alone = texts(costs, 0.3, n=1)
    alone[0].policy.probes.plain_run = 100
    n_alone = 0
    for _ in range(200):
        (k,) = plan_batch(alone, [None])
        n_alone += k > 0
        alone[0].policy.update(k, 0, LONE * k, ROWS[1 + k])
    n_batch = sum(1 for ks in plans if any(ks))
    assert n_batch <= 2 * n_alone + 4, (n_batch, n_alone)


def test_a_probes_catch_up_is_learned_in_a_batch():
    """A probe after plain steps also fed the head the last tokens those steps emitted: in a Batch
    the draft phase beyond its draft token is that catch-up (it stayed at its prior before)."""
    costs = batch_costs()
    (t,) = texts(costs, 0.3, n=1)
    p = t.policy
    p._drafted_once, p._drafted_last, p._missed = True, False, 20
    before = costs.catch_up()
    observe_batch_draft(costs, [(1, p), (0, None), (0, None)], LONE + 6 * 0.001, "greedy")
    assert costs.catch_up() == pytest.approx(0.001, rel=0.2) and before < 0.0005


def test_texts_that_start_together_start_their_probe_clocks_anew():
    """A new policy takes the last one's probe clock (short generations keep probing at their
    gap); texts that start a Batch together each took the same clock, so each probed at its
    first steps: there the clock starts at 0. A text alone keeps it."""
    costs = CostModel.table(ROWS, LONE)
    ts = texts(costs, 0.3)
    for t in ts:
        t.policy.probes.plain_run = 100
    assert plan_batch(ts, [None] * 4) == [0, 0, 0, 0]
    assert all(t.policy.probes.plain_run == 1 for t in ts)
    (alone,) = texts(costs, 0.02, n=1)  # (alone, a 2-row verify costs what 1 row does)
    alone.policy.probes.plain_run = 100
    assert plan_batch([alone], [None]) == [1] and alone.policy.trace[-1].probe  # due: it probes
