"""pymtp.policy: the confidence cut is the price of the draft's cheapest verify row (issue #29,
round 10).

One cut applies at every position of a draft (the drafter's loop ends the draft at the first
token below it). The deep variant on the 2-core Zen 4 verifies 2-3 rows in 0.9x one row's time and
4-5 rows in 1.4-1.6x: set by the last row alone, a 4-token draft's cut was 0.41, and it dropped the
first token (whose row costs nothing) in most steps: the head decode paid, nothing verified."""

from __future__ import annotations

import pytest

from pymtp import SpecConfig
from pymtp.policy import P_MIN_CAP, AutoPolicy, CostModel

MS = 1e-3
#: the deep variant's verify at 1 thread: 13.5 ms for one row, then the shape above
DEEP_ROWS = {1: 13.5 * MS, 2: 12.4 * MS, 3: 12.8 * MS, 4: 18.9 * MS, 5: 21.6 * MS, 6: 24.3 * MS, 8: 29.7 * MS}
LINE = {n: (13.5 + 1.7 * (n - 1)) * MS for n in range(1, 9)}
CONVEX = {n: (13.5 + 0.5 * (n - 1) ** 2) * MS for n in range(1, 9)}


def cut_of(rows: dict[int, float], k: int, rows_before: int = 0) -> tuple[float, float]:
    """The cut auto sets for a k-token draft, and the tokens per second it was set from."""
    p = AutoPolicy(SpecConfig(policy="auto", n_draft=4), 4, costs=CostModel.table(rows, 1.8 * MS))
    p.kept.rates = lambda prior=None: [0.7, 0.7, 0.8, 0.9]
    p._rows_before = rows_before
    gain, cost = p.expected(0, rows_before, float(rows_before))
    tps = [g / c for g, c in zip(gain, cost)]
    return p._cut(k, tps, cost), tps[k]


def test_a_draft_whose_first_row_is_free_has_no_cut():
    """(main: 0.9 for 3 tokens, where the 4th row costs 6 ms, and 0.27 for 4 at the rate here)"""
    for k in (1, 2, 3, 4):
        assert cut_of(DEEP_ROWS, k)[0] == 0.0


@pytest.mark.parametrize("before", [0, 3])
def test_where_each_row_costs_alike_the_cut_is_that_row_s_price(before):
    for k in (1, 2, 4):
        cut, tps = cut_of(LINE, k, before)
        assert cut == pytest.approx(min(P_MIN_CAP, tps * 1.7 * MS))


def test_where_later_rows_cost_more_the_cut_is_the_first_row_s_price():
    for k in (2, 3, 4):
        cut, tps = cut_of(CONVEX, k)
        assert cut == pytest.approx(tps * 0.5 * MS) and cut < tps * (CONVEX[k + 1] - CONVEX[k])
