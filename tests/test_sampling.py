"""Sampler without a model: the native transform against numpy reference formulas, draws, and
the acceptance rules of verify() (greedy, and stochastic rejection sampling on a tiny
vocabulary). The native arithmetic is float32: probabilities agree to about 1e-7."""

from __future__ import annotations

from collections import Counter
from itertools import product

import numpy as np
import pytest
from test_distribution import P_EXACT, _residual_ignored, goodness_of_fit

from pymtp import SamplingConfig
from pymtp.sampling import Sampler
from pymtp_testing.reference_sampling import reference_draw, reference_probs, reference_race, softmax

RTOL = 2e-6  # float32 probabilities (numpy's reference: float64)

# Distinct values (no ties at any cut), positive and negative (the penalty treats them apart).
ROW = np.array([2.0, -1.0, 0.5, 3.1, -0.2, 1.4, 0.9, -2.5], dtype=np.float32)


def probs(row, history=(), **cfg):
    return Sampler(SamplingConfig(**cfg)).probs(row, list(history))


# ---- the transform ---------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_temperature(temperature):
    p = probs(ROW, temperature=temperature)
    np.testing.assert_allclose(p, softmax(ROW.astype(np.float64) / temperature), rtol=RTOL)
    assert p.dtype == np.float64


@pytest.mark.parametrize("top_k", [1, 3, 7, 8, 100])
def test_top_k(top_k):
    p = probs(ROW, temperature=0.7, top_k=top_k)
    np.testing.assert_allclose(p, reference_probs(ROW, temperature=0.7, top_k=top_k), rtol=RTOL)
    assert np.count_nonzero(p) == min(top_k, len(ROW))


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.8, 0.95, 0.999])
def test_top_p(top_p):
    p = probs(ROW, temperature=1.2, top_p=top_p)
    np.testing.assert_allclose(p, reference_probs(ROW, temperature=1.2, top_p=top_p), rtol=RTOL)
    # the smallest set of likeliest tokens whose mass reaches top_p
    full = softmax(ROW.astype(np.float64) / 1.2)
    kept = np.flatnonzero(p)
    assert full[kept].sum() >= top_p
    assert full[kept].sum() - full[kept].min() < top_p
    assert full[kept].min() > full[np.flatnonzero(p == 0)].max(initial=0)


def test_top_p_on_a_hand_computed_row():
    # probabilities 0.5, 0.3, 0.15, 0.05: top-p 0.8 keeps the first two, 0.81 the first three
    row = np.log(np.array([0.3, 0.05, 0.5, 0.15]))
    np.testing.assert_allclose(probs(row, temperature=1.0, top_p=0.79), [0.375, 0, 0.625, 0], atol=1e-12)
    np.testing.assert_allclose(
        probs(row, temperature=1.0, top_p=0.81), [0.3, 0, 0.5, 0.15] / np.float64(0.95), atol=1e-12
    )


@pytest.mark.parametrize("min_p", [0.01, 0.1, 0.3, 0.9])
def test_min_p(min_p):
    p = probs(ROW, temperature=0.8, min_p=min_p)
    np.testing.assert_allclose(p, reference_probs(ROW, temperature=0.8, min_p=min_p), rtol=RTOL)
    full = softmax(ROW.astype(np.float64) / 0.8)
    assert set(np.flatnonzero(p)) == set(np.flatnonzero(full >= min_p * full.max()))


@pytest.mark.parametrize("penalty", [0.5, 1.3, 3.0])
def test_repetition_penalty(penalty):
    history = [0, 1, 1, 4, 3]  # positive (0, 3) and negative (1, 4) logits; 1 repeated
    s = Sampler(SamplingConfig(temperature=1.0, repetition_penalty=penalty))
    want = ROW.astype(np.float64).copy()
    want[[0, 3]] /= penalty  # a positive logit is divided
    want[[1, 4]] *= penalty  # a negative one multiplied, once however often it occurs
    np.testing.assert_allclose(s.probs(ROW, history), softmax(want), rtol=RTOL)
    np.testing.assert_array_equal(ROW, np.array([2.0, -1.0, 0.5, 3.1, -0.2, 1.4, 0.9, -2.5], dtype=np.float32))


def test_repetition_penalty_window():
    # only the last `window` tokens of the history count
    history = [3, 0, 5, 2]
    for window in (1, 2, 4):
        got = probs(ROW, history, temperature=1.0, repetition_penalty=2.0, repetition_window=window)
        np.testing.assert_allclose(got, reference_probs(ROW, history, penalty=2.0, window=window), rtol=RTOL)
    off = Sampler(SamplingConfig(temperature=1.0, repetition_penalty=2.0, repetition_window=0))
    assert not off.penalizes
    np.testing.assert_allclose(off.probs(ROW, history), softmax(ROW), rtol=RTOL)
    assert not Sampler(SamplingConfig(temperature=1.0)).penalizes
    np.testing.assert_allclose(probs(ROW, [], temperature=1.0, repetition_penalty=2.0), softmax(ROW), rtol=1e-6)


@pytest.mark.parametrize("presence, frequency", [(0.5, 0.0), (0.0, 0.7), (1.5, -0.4), (-1.0, 2.0)])
def test_presence_and_frequency_penalties(presence, frequency):
    history = [0, 3, 3, 3, 6, 1]
    got = probs(ROW, history, temperature=1.0, presence_penalty=presence, frequency_penalty=frequency)
    want = reference_probs(ROW, history, presence=presence, frequency=frequency)
    np.testing.assert_allclose(got, want, rtol=RTOL)
    x = ROW.astype(np.float64).copy()
    x[3] -= 3 * frequency + presence  # three occurrences, one presence
    x[[0, 6, 1]] -= frequency + presence
    np.testing.assert_allclose(got, softmax(x), rtol=RTOL)


def test_logit_bias():
    bias = {1: 4.0, 3: -100.0}
    got = probs(ROW, [], temperature=1.0, logit_bias=bias)
    np.testing.assert_allclose(got, reference_probs(ROW, bias=bias), rtol=RTOL, atol=1e-12)
    assert got[3] < 1e-30 and got.argmax() == 1
    s = Sampler(SamplingConfig(logit_bias={"5": 2.0}))  # JSON keys are strings
    assert s.config.logit_bias == ((5, 2.0),) and s.choose(ROW, []) == 5  # 1.4 + 2 > 3.1: greedy sees it
    with pytest.raises(ValueError, match="outside the vocabulary"):
        Sampler(SamplingConfig(logit_bias={8: 1.0})).probs(ROW, [])
    with pytest.raises(ValueError, match="outside"):
        SamplingConfig(logit_bias={1: 101.0})


@pytest.mark.parametrize(
    "cfg",
    [
        dict(temperature=0.9, top_k=5, top_p=0.9, min_p=0.05, repetition_penalty=1.5),
        dict(temperature=1.7, top_k=6, top_p=0.7, repetition_penalty=0.8),
        dict(temperature=0.5, top_p=0.99, min_p=0.2, repetition_penalty=2.0, repetition_window=2),
    ],
)
def test_the_transforms_in_order(cfg):
    history = [3, 5, 1, 3]
    ref = reference_probs(
        ROW,
        history,
        temperature=cfg["temperature"],
        top_k=cfg.get("top_k", 0),
        top_p=cfg.get("top_p", 1.0),
        min_p=cfg.get("min_p", 0.0),
        penalty=cfg["repetition_penalty"],
        window=cfg.get("repetition_window", 64),
    )
    np.testing.assert_allclose(probs(ROW, history, **cfg), ref, rtol=RTOL)


def test_greedy_probs_and_choice():
    s = Sampler(SamplingConfig())
    assert s.config.greedy
    np.testing.assert_array_equal(s.probs(ROW, []), np.eye(len(ROW))[3])
    assert s.choose(ROW, []) == 3
    pen = Sampler(SamplingConfig(repetition_penalty=2.0))
    # 3.1 / 2 < 2.0: with 3 in the history, token 0 wins
    assert pen.choose(ROW, [3]) == 0 and pen.probs(ROW, [3]).argmax() == 0


# ---- draws -----------------------------------------------------------------------------------------


def test_draws_follow_the_distribution():
    p = reference_probs(ROW, temperature=1.5, top_k=5)
    s = Sampler(SamplingConfig(temperature=1.5, top_k=5, seed=7))
    counts = Counter(s.choose(ROW, []) for _ in range(20_000))
    assert set(counts) <= set(np.flatnonzero(p))  # never a token of probability 0
    assert goodness_of_fit(counts, dict(enumerate(p))) > P_EXACT
    # tokens whose logit is -inf are never drawn; the rest in proportion
    row = np.array([-np.inf, np.log(2.0), -np.inf, np.log(6.0)])
    s = Sampler(SamplingConfig(temperature=1.0, seed=3))
    counts = Counter(s.choose(row, []) for _ in range(4000))
    assert set(counts) == {1, 3} and abs(counts[3] / 4000 - 0.75) < 0.03


def test_draw_edges():
    s = Sampler(SamplingConfig(temperature=1.0, seed=0))
    assert all(s.choose(np.array([-np.inf, -np.inf, 0.0]), []) == 2 for _ in range(50))
    assert all(s.choose(np.array([0.0, -np.inf, -np.inf]), []) == 0 for _ in range(50))


def test_a_seed_repeats_its_draws_and_other_seeds_differ():
    def draws(seed):
        s = Sampler(SamplingConfig(temperature=2.0, seed=seed))
        return [s.choose(ROW, []) for _ in range(40)]

    assert draws(5) == draws(5)
    assert len({tuple(draws(seed)) for seed in range(5)}) == 5


@pytest.mark.parametrize(
    "cfg",
    [
        dict(temperature=0.8),
        dict(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.05),  # Qwen's settings
        dict(temperature=1.0, top_p=0.95),
        dict(temperature=1.3, min_p=0.05, presence_penalty=0.5),
    ],
)
@pytest.mark.parametrize("rule", ["rejection", "coupled"])
def test_plain_sampling_draws_what_the_numpy_sampler_drew(cfg, rule):
    """For a fixed seed, native sampling gives the same tokens as the numpy sampler written out
    in pymtp_testing: rejection, pymtp's former numpy sampler (the same uniforms, the same
    inverse CDF); coupled, the exponential race keyed by (seed, position)."""
    rng = np.random.default_rng(0)
    n_vocab = 3000
    s = Sampler(SamplingConfig(seed=42, sampling_rule=rule, **cfg))
    ref_rng = np.random.default_rng(42)
    history: list[int] = []
    for _ in range(300):
        row = (rng.standard_normal(n_vocab) * 3).astype(np.float32)
        p = reference_probs(
            row,
            history,
            temperature=cfg["temperature"],
            top_k=cfg.get("top_k", 0),
            top_p=cfg.get("top_p", 1.0),
            min_p=cfg.get("min_p", 0.0),
            penalty=cfg.get("repetition_penalty", 1.0),
            presence=cfg.get("presence_penalty", 0.0),
        )
        want = reference_draw(ref_rng, p) if rule == "rejection" else reference_race(p, 42, len(history))
        assert s.choose(row, history) == want
        history.append(want)


@pytest.mark.parametrize("seed", range(6))
def test_the_native_transform_at_a_real_vocabulary_size(seed):
    """Random settings on 151,552-token rows (every path: top-k by heap and by selection, the
    nucleus found by the exponent histogram, min-p, penalties, bias)."""
    rng = np.random.default_rng(seed)
    n_vocab = 151_552
    row = (rng.standard_normal(n_vocab) * rng.uniform(1, 6)).astype(np.float32)
    history = rng.integers(0, n_vocab, size=80).tolist()
    cfg = dict(
        temperature=float(rng.uniform(0.3, 1.5)),
        top_k=int(rng.choice([0, 20, 1000])),
        top_p=float(rng.choice([1.0, 0.8, 0.95])),
        min_p=float(rng.choice([0.0, 0.05])),
        repetition_penalty=float(rng.choice([1.0, 1.1])),
        presence_penalty=float(rng.choice([0.0, 0.4])),
        frequency_penalty=float(rng.choice([0.0, 0.3])),
        logit_bias={int(rng.integers(n_vocab)): 5.0},
    )
    got = Sampler(SamplingConfig(**cfg)).probs(row, history)
    want = reference_probs(
        row,
        history,
        temperature=cfg["temperature"],
        top_k=cfg["top_k"],
        top_p=cfg["top_p"],
        min_p=cfg["min_p"],
        penalty=cfg["repetition_penalty"],
        presence=cfg["presence_penalty"],
        frequency=cfg["frequency_penalty"],
        bias=dict(cfg["logit_bias"]),
    )
    np.testing.assert_array_equal(got > 0, want > 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-9)


def test_bad_input_raises_before_the_arithmetic():
    s = Sampler(SamplingConfig(temperature=1.0, repetition_penalty=1.2))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        s.probs(ROW, [3, 99])
    with pytest.raises(ValueError, match="target rows"):
        s.verify(ROW[None, :], [1, 2], [softmax(ROW)] * 2, [])
    with pytest.raises(ValueError, match="shape"):
        s.verify(np.tile(ROW, (2, 1)), [1], [np.ones(3)], [])


# ---- verify: greedy ------------------------------------------------------------------------------


def rows_with_argmax(tokens, n_vocab=8, runner_up=None):
    """One logits row per token, its argmax that token (runner_up: the second best of each row)."""
    rows = np.tile(np.linspace(-1.0, 0.0, n_vocab, dtype=np.float32), (len(tokens), 1))
    for i, t in enumerate(tokens):
        rows[i, t] = 5.0
        if runner_up is not None:
            rows[i, runner_up[i]] = 4.0
    return rows


def test_greedy_verify_accepts_the_longest_matching_prefix():
    s = Sampler(SamplingConfig())
    rows = rows_with_argmax([4, 2, 7, 1])
    assert s.verify(rows, [4, 2, 7], None, [])[:2] == (3, 1)  # all accepted, then the bonus token
    assert s.verify(rows, [4, 2, 0], None, [])[:2] == (2, 7)  # the target's own token at the mismatch
    assert s.verify(rows, [4, 5, 7], None, [])[:2] == (1, 2)  # nothing after a mismatch counts
    assert s.verify(rows, [3, 2, 7], None, [])[:2] == (0, 4)
    assert s.verify(rows[:1], [], None, [])[:2] == (0, 4)  # no draft: a plain step
    assert isinstance(s.verify(rows, [4], None, [])[1], int)


def test_greedy_verify_with_a_repetition_penalty_sees_the_draft():
    # each row's argmax is token 3, its runner-up another token; 3 is penalized once it is in
    # the history, so the target's choice at position i depends on history + draft[:i]
    s = Sampler(SamplingConfig(repetition_penalty=2.0))
    rows = rows_with_argmax([3, 3, 3], runner_up=[6, 5, 2])
    assert s.verify(rows, [3, 5], None, [])[:2] == (2, 2)  # 3 is fine first, then penalized
    assert s.verify(rows, [3, 3], None, [])[:2] == (1, 5)
    assert s.verify(rows, [6, 5], None, [3])[:2] == (2, 2)  # 3 already in the history
    assert s.verify(rows, [3], None, [3])[:2] == (0, 6)
    plain = Sampler(SamplingConfig())
    assert plain.verify(rows, [3, 3], None, [])[:2] == (2, 3)


def test_greedy_verify_with_a_logit_bias():
    s = Sampler(SamplingConfig(logit_bias={6: 1.5}))  # the runner-up of row 0 wins there
    rows = rows_with_argmax([3, 3], runner_up=[6, 5])
    assert s.verify(rows, [3], None, [])[:2] == (0, 6)
    assert s.verify(rows, [6], None, [])[:2] == (1, 3)


# ---- verify: rejection sampling --------------------------------------------------------------------


class GridRNG:
    """Stands in for the sampler's RNG: random() returns the next value(s) of a script."""

    def __init__(self, values):
        self.values = list(values)

    def random(self, n=None):
        if n is None:
            return self.values.pop(0)
        out, self.values = np.array(self.values[:n]), self.values[n:]
        return out


P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.1, 0.1, 0.8])


def test_rejection_sampling_is_exact_on_a_tiny_vocabulary():
    """k = 1 on a 3-token vocabulary, integrated over midpoint grids of M uniforms (each
    probability to within 1/M): draft d is accepted with probability min(1, p/q), a rejection
    draws from normalize(max(0, p - q)), the bonus token from the next row's p, and the emitted
    token is distributed as p. verify() takes two uniforms: the acceptance test's and the draw's."""
    M = 2000
    grid = (np.arange(M) + 0.5) / M
    s = Sampler(SamplingConfig(temperature=1.0))
    bonus = np.array([0.2, 0.2, 0.6])
    rows = np.log(np.array([P, bonus]))

    def run(d, u_accept, u_draw):
        s.rng = GridRNG([u_accept, u_draw])
        return s.verify(rows, [d], [Q], [])[:2]

    residual = np.maximum(P - Q, 0) / np.maximum(P - Q, 0).sum()
    emitted = np.zeros(3)
    for d in range(3):
        a = np.mean([run(d, u, 0.5)[0] == 1 for u in grid])
        assert abs(a - min(1.0, P[d] / Q[d])) <= 1 / M, d
        if a > 0:  # after a full accept, the bonus token is drawn from the next row's p
            got = np.bincount([run(d, 0.0, u)[1] for u in grid], minlength=3) / M
            np.testing.assert_allclose(got, bonus, atol=2 / M)
        if a < 1:  # a rejection draws from the residual
            outs = [run(d, 1 - 0.5 / M, u) for u in grid]
            assert all(n == 0 for n, _ in outs)
            got = np.bincount([t for _, t in outs], minlength=3) / M
            np.testing.assert_allclose(got, residual, atol=2 / M)
        emitted[d] += Q[d] * a
        emitted += Q[d] * (1 - a) * residual
    np.testing.assert_allclose(emitted, P, atol=2 / M)


def test_rejection_sampling_two_positions_by_seeded_draws():
    """k = 2, where the second position's target and head distributions depend on the first draft
    token: the first two emitted tokens (completed by plain sampling after a rejection) follow
    p1(x1) p2(x2 | x1). 8,000 seeded draws, chi-square on the 9 pairs; the same test rejects a
    rule that draws a rejection's replacement from p instead of the residual."""
    p2 = {0: np.array([0.6, 0.2, 0.2]), 1: np.array([0.1, 0.1, 0.8]), 2: np.array([0.3, 0.4, 0.3])}
    q2 = {0: np.array([0.2, 0.2, 0.6]), 1: np.array([0.3, 0.3, 0.4]), 2: np.array([0.3, 0.4, 0.3])}
    rows = {d1: np.log(np.array([P, p2[d1], [1 / 3, 1 / 3, 1 / 3]])) for d1 in range(3)}
    want = {(a, b): P[a] * p2[a][b] for a, b in product(range(3), range(3))}
    n = 8000
    rng = np.random.default_rng(12)
    d1s = rng.choice(3, size=n, p=Q)
    d2s = [int(rng.choice(3, p=q2[d1])) for d1 in d1s]
    more = rng.random(n)  # plain sampling of the second token after a rejection

    def emitted(s: Sampler) -> Counter:
        counts = Counter()
        for d1, d2, u in zip(d1s.tolist(), d2s, more):
            n_acc, new = s.verify(rows[d1], [d1, d2], [Q, q2[d1]], [])[:2]
            out = [d1, d2][:n_acc] + [new]
            if len(out) == 1:
                out.append(int(np.searchsorted(np.cumsum(p2[out[0]]), u, side="right")))
            counts[tuple(out[:2])] += 1
        return counts

    assert goodness_of_fit(emitted(Sampler(SamplingConfig(temperature=1.0, seed=11))), want) > P_EXACT
    wrong = Sampler(SamplingConfig(temperature=1.0, seed=11))
    wrong.verify = _residual_ignored.__get__(wrong)
    assert goodness_of_fit(emitted(wrong), want) < P_EXACT


def test_stochastic_verify_uses_the_transform_with_the_draft_as_history():
    """p at draft position i is probs(row i, history + draft[:i]): a token the penalty pushes out of
    the top-k after it was drafted is never accepted at the next position."""
    cfg = SamplingConfig(temperature=1.0, top_k=2, repetition_penalty=10.0)
    s = Sampler(cfg)
    row0 = np.array([0.0, 3.0, 2.9, -5.0])  # top-2 {1, 2}
    row1 = np.array([0.0, 3.0, 2.9, 2.8])  # after drafting 1: 1 is penalized -> top-2 {2, 3}
    rows = np.array([row0, row1, row1])
    q = np.array([0.0, 1.0, 0.0, 0.0])  # the head always drafts 1
    seen = Counter()
    for seed in range(300):
        s.rng = np.random.default_rng(seed)
        n_acc, new = s.verify(rows, [1, 1], [q, q], [])[:2]
        seen[n_acc] += 1
        assert n_acc < 2  # the second 1 has p = 0 there
        if n_acc == 1:
            assert new in (2, 3)
    assert seen[1] > 0 and seen[0] > 0
