"""pymtp.policy in a Batch where probes keep losing: the probe budget backs off (issue #29,
round 9). Fake texts as in test_policy_batch: the default model's costs on the 2-core Zen 4."""

from __future__ import annotations

import random

from test_policy_batch import LONE, ROWS, FakeText

from pymtp import SpecConfig
from pymtp.costs import CostModel
from pymtp.policy import AutoPolicy, plan_batch


class Model:
    """Stands for a loaded model: the key the estimates and the probe clock are carried under."""


def generation(model, costs, acceptance: float, seed: int, n: int = 4, steps: int = 47) -> tuple[int, list]:
    """One generation of n texts started together, `steps` steps, each drafted token accepted at
    `acceptance`: (the probes, the texts' policies)."""
    rng = random.Random(seed)
    ts = [FakeText(AutoPolicy(SpecConfig(policy="auto", n_draft=1), 1, costs=costs, model=model)) for _ in range(n)]
    probes = 0
    for _ in range(steps):
        ks = plan_batch(ts, [None] * n)
        for t, k in zip(ts, ks):
            accepted = sum(rng.random() < acceptance for _ in range(k))
            probes += bool(k and t.policy.trace[-1].probe)
            t.policy.update(k, accepted, LONE * k, ROWS.get(n + sum(ks), 0.03))
    return probes, [t.policy for t in ts]


def test_probes_that_keep_losing_in_a_batch_spend_less_of_the_budget():
    """4 texts at acceptance 0.3 (no draft pays): each probe did no better than expected. With the
    whole budget every generation, 20 generations of 48 tokens probed 25 times; the budget halves
    after each losing probe, so the later generations do not probe."""
    model, costs = Model(), CostModel.table(ROWS, LONE)
    counts = [generation(model, costs, 0.3, g)[0] for g in range(20)]
    assert sum(counts) <= 10, counts
    assert sum(counts[:2]) >= 1, counts  # (it did probe: the estimate is still checked)
    _, policies = generation(model, costs, 0.3, 99)
    assert all(p.probes.share <= 0.25 for p in policies)


def test_a_text_that_changes_is_still_found_and_a_better_probe_restores_the_budget():
    """After generations whose probes lost (the budget backed off), texts where every draft is
    accepted: the probes that remain find it and drafting resumes; a probe that did better than
    expected makes the whole budget available again."""
    model, costs = Model(), CostModel.table(ROWS, LONE)
    for g in range(3):
        generation(model, costs, 0.3, g)
    _, policies = generation(model, costs, 1.0, 7, steps=200)
    # (the first text's probes, as good as its climbing estimate expected, kept its budget low:
    # it drafts later than the others, 13 of the last 50 steps; 50 each on main)
    assert sum(c.k > 0 and not c.probe for p in policies for c in p.trace[-50:]) >= 150
    ts = [FakeText(AutoPolicy(SpecConfig(policy="auto", n_draft=1), 1, costs=costs)) for _ in range(4)]
    for t in ts:
        for est in (t.policy.acceptance, t.policy.acceptance_all):
            est.reached, est.accepted = [40.0], [12.0]
    assert plan_batch(ts, [None] * 4) == [0, 0, 0, 0]
    for t in ts:
        t.policy.update(0, 0, 0.0, ROWS[4])
        t.policy.probes.share, t.policy.probes.plain_run = 0.25, 1000  # (due)
    ks = plan_batch(ts, [None] * 4)
    assert ks[0] == 1 and ts[0].policy.trace[-1].probe
    ts[0].policy.update(1, 1, LONE, ROWS[5])
    assert ts[0].policy.probes.share == 1.0


def test_a_single_stream_keeps_the_whole_budget():
    """One text alone: losing probes back off through the gap only (single streams pass their
    targets with the whole budget)."""
    model, costs = Model(), CostModel.table(ROWS, LONE)
    _, (p,) = generation(model, costs, 0.0, 0, n=1, steps=400)
    assert any(c.probe for c in p.trace)
    assert p.probes.share == 1.0
