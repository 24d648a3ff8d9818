"""pymtp.stats: the counters of a generation (plain arithmetic, no model)."""

from __future__ import annotations

from pymtp.stats import SpecStats, StepResult


def _step(drafted: int, accepted: int) -> StepResult:
    return StepResult(
        drafted=list(range(drafted)),
        n_accepted=accepted,
        emitted=[0] * (accepted + 1),
        t_draft=0.0,
        t_verify=0.0,
        t_total=0.0,
        source="mtp",
    )


def test_acceptance_by_position_keeps_positions_never_accepted():
    """Drafts of 3 whose last two tokens were never accepted: three positions, two of them 0."""
    s = SpecStats()
    for accepted in (1, 0, 1, 1):
        s.record(_step(3, accepted))
    assert s.drafted_at == [4, 4, 4]
    assert s.acceptance_by_position == [0.75, 0.0, 0.0]


def test_acceptance_by_position_nothing_accepted_and_nothing_drafted():
    s = SpecStats()
    s.record(_step(2, 0))
    assert s.acceptance_by_position == [0.0, 0.0]
    assert SpecStats().acceptance_by_position == []
    plain = SpecStats()
    plain.record(_step(0, 0))  # a plain step drafts nothing: no position
    assert plain.acceptance_by_position == []


def test_acceptance_by_position_varying_draft_lengths():
    s = SpecStats()
    s.record(_step(4, 2))
    s.record(_step(1, 1))
    assert s.drafted_at == [2, 1, 1, 1] and s.accepted_at == [2, 1]
    assert s.acceptance_by_position == [1.0, 1.0, 0.0, 0.0]
