"""pymtp.costs: a draft priced as its first head decode plus later ones (issue #29).

A draft's first head decode also feeds the head the tokens the last verify accepted, so it costs
more than each later one (echo-70 on the 2-core Zen 4: 2.7 / 3.25 / 4.3 ms for 1 / 2 / 3 tokens).
Priced per token, learned from 1-token drafts, longer drafts looked 1.5-2x their cost."""

from __future__ import annotations

import pytest

from pymtp import SpecConfig
from pymtp.policy import AutoPolicy, CostModel

MS = 1e-3


def learned(lengths: dict[int, float], times: int = 20) -> CostModel:
    cm = CostModel({1: 20 * MS, 2: 22.5 * MS, 3: 25 * MS, 4: 27.5 * MS}, c_draft=2 * MS)
    for _ in range(times):
        for n, seconds in lengths.items():
            cm.observe_draft(n, seconds)
    return cm


def test_a_draft_costs_its_first_decode_plus_later_ones():
    cm = learned({1: 2.7 * MS, 2: 3.25 * MS})
    first, nxt = cm.draft_parts()
    assert first == pytest.approx(2.7 * MS, rel=0.02) and nxt == pytest.approx(0.55 * MS, rel=0.05)
    # a 3-token draft: near 3.8 ms (4.3 measured), not 3 x a per-token mean (6-8 ms)
    assert 3.7 * MS <= cm.draft_seconds(3) <= 4.4 * MS
    assert cm.draft_seconds(0) == 0.0 and cm.draft_seconds(1) == pytest.approx(first)
    # three lengths: a line through them (weighted least squares)
    cm = learned({1: 2.7 * MS, 2: 3.25 * MS, 3: 4.3 * MS})
    assert 4.0 * MS <= cm.draft_seconds(3) <= 4.4 * MS
    # the parts follow the machine's load like the rest of the costs
    for _ in range(12):
        cm.observe_verify(1, 0, 40 * MS)
    assert cm.draft_seconds(3) == pytest.approx(2 * learned({1: 2.7 * MS, 2: 3.25 * MS, 3: 4.3 * MS}).draft_seconds(3))


def test_one_length_alone_prices_longer_drafts_with_the_prior_ratio():
    from pymtp.costs import NEXT_PRIOR

    cm = learned({1: 2.7 * MS})
    assert cm.draft_seconds(3) == pytest.approx(2.7 * MS * (1 + 2 * NEXT_PRIOR), rel=0.02)
    # before any timing, and for a fixed table: the per-token price, as before
    fresh = CostModel({1: 20 * MS}, c_draft=2 * MS)
    assert fresh.draft_seconds(3) == pytest.approx(6 * MS)
    assert CostModel.table({1: 20 * MS}, 2 * MS).draft_seconds(2) == pytest.approx(4 * MS)


def test_batch_drafts_teach_the_share_not_the_lengths():
    cm = learned({1: 2.7 * MS})
    before = cm.draft_parts()
    for _ in range(20):
        cm.observe_draft(4, 4.0 * MS, calls=1)  # 4 texts sharing one head decode
    assert cm.draft_parts() == pytest.approx(before)
    assert cm.draft_share() == pytest.approx((4.0 / 2.7 - 1) / 3, rel=0.1)


def test_auto_drafts_two_tokens_where_the_acceptance_pays_for_them():
    """Acceptance 0.54 / 0.51 / 0.48 by position (the default model's head), a verify row +12.5%
    of a one-row verify, drafts timed at 2.7 ms (1 token) and 3.25 ms (2 tokens): 2 tokens earn
    the most (1.815 tokens in 28.25 ms against 1.54 in 25.2); priced per token (2.2 ms), 1 token
    won."""
    p = AutoPolicy(SpecConfig(policy="auto", n_draft=3), 3, costs=learned({1: 2.7 * MS, 2: 3.25 * MS}))
    p.acceptance.rates = lambda prior=None: [0.54, 0.51, 0.48]
    p.kept.rates = lambda prior=None: [1.0, 1.0, 1.0]
    gain, cost = p.expected(0)
    assert cost[2] - cost[0] == pytest.approx(5 * MS + 3.25 * MS, rel=0.02)
    assert p.next_length(0) == 2
