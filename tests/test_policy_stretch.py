"""pymtp.policy: the drafts one token longer than the best (which time a verify of one more row,
in case the calibration made it too dear) back off where they lose, across generations."""

from __future__ import annotations

import random

from pymtp import SpecConfig
from pymtp.policy import PROBE_FIRST, AutoPolicy, CostModel


class Model:  # the key the policy carries its estimates under
    pass


def generations(costs, truth, accept, n_gen, steps, seed=0):
    """n_gen generations of `steps` steps on one model (the estimates and clocks carry); the
    lengths chosen, generation by generation."""
    rng, model, out = random.Random(seed), Model(), []
    for _ in range(n_gen):
        p = AutoPolicy(SpecConfig(policy="auto", n_draft=4), 4, model=model, costs=costs)
        ks = []
        for _ in range(steps):
            k = p.next_length(0)
            n_acc = 0
            while n_acc < k and rng.random() < accept:
                n_acc += 1
            p.update(k, n_acc, 0.02 * k, truth[k + 1])
            ks.append(k)
        out.append(ks)
    return out


def test_longer_drafts_that_lose_back_off_across_short_generations():
    """A fourth row costs 1.6 rows (the calibration says so, rightly): three-token drafts lose
    by nearly half to two-token ones at acceptance 0.7. Drafted every PROBE_FIRST steps until four
    rows were timed 16 times (decayed), and from step 0 of each generation, they took 2 steps of
    each 20-step generation (2-3% of the time on echo-70 in round 11's simulation); each one
    that loses now doubles the gap, carried from one generation to the next."""
    truth = {1: 1.0, 2: 1.3, 3: 1.4, 4: 3.0, 5: 3.4}
    ks = [k for gen in generations(CostModel(truth, 0.02), truth, 0.7, 8, 20) for k in gen]
    longer = sum(1 for k in ks if k >= 3)
    assert longer <= 5, longer  # 160 steps: at steps 8, 24, 56, 120 (and one of noise)
    assert longer >= 2  # they still come (PROBE_MAX is the longest gap)
    assert sorted(ks)[len(ks) // 2] == 2


def test_a_longer_draft_made_too_dear_is_still_found_across_short_generations():
    """The calibration says 5 rows cost 4x one row; they cost 2.2x. A four-token draft's verify,
    taken at its word, would win: the next comes PROBE_FIRST steps later, not after a doubled
    gap, and within 15 generations of 20 steps the policy drafts four tokens."""
    truth = {1: 1.0, 2: 1.3, 3: 1.6, 4: 1.9, 5: 2.2}
    gens = generations(CostModel({**truth, 5: 4.0}, 0.02), truth, 1.0, 15, 20)
    first = [k for gen in gens for k in gen][: 4 * PROBE_FIRST]
    assert first.count(4) >= 3
    assert all(k == 4 for gen in gens[-3:] for k in gen[:-1])
