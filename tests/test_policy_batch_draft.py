"""pymtp.policy.observe_batch_draft: a Batch's drafting phase priced as the lone parts (a draft's
first head decode, then each later one) at the positions the texts share (issue #29, round 10).

A draft's first head decode costs more than each later one (CostModel.draft_parts). A Batch's
phase where several texts drafted was priced per token (their count times a per-token mean), so
texts drafting 2 tokens each taught a share of a shared decode near 0 where it was 0.4, and a
probe's catch-up beside another drafting text came out wrong by the same error."""

from __future__ import annotations

import pytest

from pymtp import SpecConfig
from pymtp.costs import CostModel
from pymtp.policy import AutoPolicy, observe_batch_draft

MS = 1e-3
ROWS = {1: 13.3 * MS, 2: 13.3 * MS, 4: 20 * MS, 8: 28 * MS}
FIRST, NEXT, SHARE = 2.7 * MS, 0.55 * MS, 0.4


def lone_drafts() -> CostModel:
    """Costs that timed lone drafts of 1 and 2 tokens (first 2.7 ms, next 0.55 ms)."""
    cm = CostModel(ROWS, 2 * MS)
    for _ in range(10):
        cm.observe_draft(1, FIRST)
        cm.observe_draft(2, FIRST + NEXT)
    return cm


def phase(decodes: list[int]) -> float:
    """The true seconds: each position's part once, SHARE of it for each other text there."""
    return sum((NEXT if j else FIRST) * (1 + SHARE * (sum(n > j for n in decodes) - 1)) for j in range(max(decodes)))


class Text:
    """What observe_batch_draft asks of a text's policy: is it catching up?"""

    catching_up = False


@pytest.mark.parametrize("decodes", [[2, 2, 0, 0], [2, 1, 1, 0], [2, 2, 2, 2]])
def test_shared_decodes_teach_the_share_of_the_lone_parts(decodes):
    cm = lone_drafts()
    assert cm.draft_parts() == pytest.approx((FIRST, NEXT), rel=0.02)
    for _ in range(30):
        observe_batch_draft(cm, [(n, Text()) for n in decodes], phase(decodes), "greedy")
    assert cm.draft_share() == pytest.approx(SHARE, abs=0.03)
    assert cm.batch_draft_seconds(decodes) == pytest.approx(phase(decodes), rel=0.03)
    # the lone parts stay as timed alone
    assert cm.draft_parts() == pytest.approx((FIRST, NEXT), rel=0.02)


def test_one_text_drafting_in_a_batch_is_a_lone_draft():
    cm = lone_drafts()
    for _ in range(30):
        observe_batch_draft(cm, [(3, Text()), (0, Text())], FIRST + 2 * NEXT, "greedy")
    assert cm.draft_seconds(3) == pytest.approx(FIRST + 2 * NEXT, rel=0.03)


def test_a_probes_catch_up_beside_another_drafting_text():
    """A probe after plain steps fed the head 6 missed tokens (1 ms each) in a phase where
    another text drafted 2 tokens too: the catch-up is what the phase took beyond both drafts."""
    cm = lone_drafts()
    for _ in range(30):
        observe_batch_draft(cm, [(n, Text()) for n in (2, 2)], phase([2, 2]), "greedy")
    p = AutoPolicy(SpecConfig(policy="auto", n_draft=2), 2, costs=cm, shared=True)
    p._drafted_once, p._drafted_last, p._missed = True, False, 20
    assert p.catching_up
    for _ in range(10):
        observe_batch_draft(cm, [(2, p), (2, Text())], phase([2, 2]) + 6 * MS, "greedy")
    assert cm.catch_up() == pytest.approx(1 * MS, rel=0.1)
