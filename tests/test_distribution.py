"""Stochastic speculation draws its tokens from the same distribution as plain sampling.

For each case (a fixture family, a SamplingConfig, a draft length), the distribution of plain
sampling's next ``depth`` tokens after one prompt is computed exactly: the target decodes every
prefix in the support of the sampling distribution (``exact_continuations``; under top-k 6 and
depth 3 that is 43 decodes). The speculator, reseeded before each sample, then draws N
continuations, and a chi-square goodness-of-fit test compares each position's token marginal and
the joint of all ``depth`` tokens with the exact distribution. An exact reference has no
sampling noise of its own, so it needs half the samples of a two-sample comparison with plain
sampling for the same power. ``test_plain_sampling_matches_the_exact_distribution`` checks the
reference itself against plain sampling; the transform both share (Sampler.probs) is checked
against numpy formulas in test_sampling.py.

Each case also runs a deliberately wrong acceptance rule through the same test, which must
reject it: the test has the power to see a wrong rule in every case, not only an absurd one.

The cases cover one attention model (glm4moe: KV trim), both recurrent rollbacks (qwen35:
n_rs_seq snapshots, qwen3next: checkpoint + re-decode), chained heads (step35, drafts of 3, one
per head) and the sampling transforms top-p, min-p and the repetition penalty. Each run also
asserts that it went through what it is meant to cover: rejections (rollbacks and the hand-off
after them), full accepts, drafts of the full length, and a transform that changes the
distribution. Samples after the first reuse the prompt's cache (prefix reuse; hybrids from their prompt snapshot).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest

import pymtp
from pymtp import SamplingConfig, SpecConfig
from pymtp.model import last_row_only
from pymtp.sampling import Q_IN_SLOTS, Q_POINT_MASS, Sampler, Verdict

#: Reject "same distribution" below this p-value. The file makes 49 tests that a correct
#: implementation must pass (depth + 1 per case: 41 over the 10 cases, and 8 for the reference),
#: so it fails a given choice of seeds with probability at most 49 x 1e-4 < 0.5% (Bonferroni).
#: The seeds are fixed, so a run is repeatable, never flaky: only a change in how random numbers
#: are drawn moves a p-value. The controls' wrong rules measured p < 2e-7 in every case over 4
#: seeds (most far below) at N_SAMPLES. (The two-sample helpers at the end, for test_smollm2,
#: keep their 1e-3.)
P_EXACT = 1e-4
#: Cells whose expected count is below this are pooled into one (the chi-square approximation).
MIN_EXPECTED = 5.0
#: Samples per run: 500 continuations take 1-3 s on one core for these fixtures.
N_SAMPLES = 500
PROMPT = "def f(x"
#: llama.cpp's decode threads spin; on a shared 2-core machine one thread is about 10x faster
#: for these tiny models than the default.
N_THREADS = 1


# ---- the chi-square test ---------------------------------------------------------------------------


def chi2_sf(stat: float, dof: int) -> float:
    """P(X > stat) for X ~ chi-square(dof): the regularized upper incomplete gamma Q(dof/2, stat/2),
    by its power series (x < a + 1) or its continued fraction, evaluated by Lentz's method."""
    a, x = dof / 2.0, stat / 2.0
    if x <= 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = 1
        while abs(term) > 1e-16 * abs(total):
            term *= x / (a + n)
            total += term
            n += 1
        return max(0.0, 1.0 - math.exp(log_front) * total)
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return math.exp(log_front) * h


def goodness_of_fit(observed: Counter, probs: dict, min_expected: float = MIN_EXPECTED) -> float:
    """p-value of the chi-square goodness-of-fit test of observed counts against probs.

    A sample outside the support of probs gives 0 (plain sampling cannot produce it). Cells
    expected fewer than min_expected times are pooled into one; if that pool is still too small
    it joins the smallest cell kept."""
    n = sum(observed.values())
    if any(probs.get(k, 0.0) <= 0.0 for k in observed):
        return 0.0
    cells, pool = [], [0, 0.0]
    for k in sorted(probs, key=lambda k: -probs[k]):
        o, e = observed.get(k, 0), probs[k] * n
        if e >= min_expected:
            cells.append([o, e])
        else:
            pool[0] += o
            pool[1] += e
    if pool[1] > 0:
        if pool[1] < min_expected and cells:
            cells[-1][0] += pool[0]
            cells[-1][1] += pool[1]
        else:
            cells.append(pool)
    if len(cells) < 2:
        return 1.0
    stat = sum((o - e) ** 2 / e for o, e in cells)
    return chi2_sf(stat, len(cells) - 1)


def marginal(dist, i: int) -> Counter | dict:
    """The distribution (or counts) of the token at position i of the continuations."""
    out: dict = Counter() if isinstance(dist, Counter) else {}
    for seq, v in dist.items():
        out[seq[i]] = out.get(seq[i], 0) + v
    return out


def p_values(samples: Counter, exact: dict, depth: int) -> list[float]:
    """Each position's marginal, then the joint of all depth tokens."""
    return [goodness_of_fit(marginal(samples, i), marginal(exact, i)) for i in range(depth)] + [
        goodness_of_fit(samples, exact)
    ]


# ---- plain sampling, exactly ------------------------------------------------------------------------


def exact_continuations(
    model, prompt: list[int], sampling: SamplingConfig, depth: int, constraint=None
) -> dict[tuple, float]:
    """The probability plain sampling gives each continuation of depth tokens: every prefix in the
    support is decoded (from position 0: recurrent models cannot trim) and its last row turned into
    a distribution by Sampler.probs with the whole text as history, as plain decoding does.
    constraint: a callable making a TokenConstraint (constrained sampling: each row is masked with
    its state after the generated tokens before it)."""
    sampler = Sampler(sampling, n_vocab=model.n_vocab)
    out: dict[tuple, float] = {}
    with pymtp.TargetContext(
        model, n_ctx=len(prompt) + depth + 8, n_batch=len(prompt) + depth, n_threads=N_THREADS
    ) as t:

        def walk(seq: list[int], prob: float) -> None:
            t.seq_rm(0)
            t.decode(seq, 0, output=last_row_only(len(seq)))
            mask = None
            if constraint is not None:
                c = constraint()
                for tok in seq[len(prompt) :]:
                    assert c.accept(tok)
                mask = np.zeros((model.n_vocab + 31) // 32, dtype=np.uint32)
                c.fill_mask(mask)
            p = sampler.probs(t.logits()[-1].copy(), seq, mask=mask)
            for tok in np.flatnonzero(p):
                key = tuple(seq[len(prompt) :]) + (int(tok),)
                if len(key) == depth:
                    out[key] = prob * float(p[tok])
                else:
                    walk(seq + [int(tok)], prob * float(p[tok]))

        walk(list(prompt), 1.0)
    return out


# ---- sampling with the speculator -------------------------------------------------------------------


@dataclass
class Coverage:
    """What the speculative steps of a run did."""

    steps: int = 0
    drafted_at: Counter = field(default_factory=Counter)  # draft length -> steps
    rejections: int = 0  # steps that rolled back a draft token
    full_accepts: int = 0
    reused_starts: int = 0  # samples whose prefill reused the cache

    def add(self, r) -> None:
        self.steps += 1
        self.drafted_at[len(r.drafted)] += 1
        if r.drafted and r.n_accepted < len(r.drafted):
            self.rejections += 1
        if r.drafted and r.n_accepted == len(r.drafted):
            self.full_accepts += 1


def sample_continuations(
    session,
    prompt: list[int],
    sampling: SamplingConfig,
    spec: SpecConfig | None,
    depth: int,
    n: int,
    seed: int,
    verify=None,
    coverage: Coverage | None = None,
    constraint=None,
) -> Counter:
    """n continuations of depth tokens; the speculator reseeded for each (seed * 100000 + i).
    verify: a replacement for Sampler.verify (a wrong rule), bound to each sample's sampler.
    constraint: a callable making each sample's TokenConstraint."""
    out: Counter = Counter()
    end = len(prompt) + depth
    with session.lock:
        spec_ = session.speculator(sampling, spec)
        for i in range(n):
            spec_.start(
                prompt,
                sampling.model_copy(update={"seed": seed * 100_000 + i}),
                constraint=constraint() if constraint else None,
            )
            if coverage is not None and spec_.stats.n_reused > 0:
                coverage.reused_starts += 1
            if verify is not None:
                spec_.sampler.verify = as_verify(verify, spec_.sampler)
            while len(spec_.tokens) < end:
                r = spec_.step(max_new=end - len(spec_.tokens))
                if coverage is not None:
                    coverage.add(r)
            out[tuple(spec_.tokens[len(prompt) : end])] += 1
    return out


# ---- wrong acceptance rules (the controls) -----------------------------------------------------------


def draw(rng, p) -> int:
    """One token from weights p, by inverse CDF in id order (as the native sampler draws)."""
    cum = np.cumsum(p)
    return int(min(np.searchsorted(cum, rng.random() * cum[-1], side="right"), len(p) - 1))


def q_of(sampler, q, i: int, draft) -> np.ndarray:
    """Draft position i's q (Draft.q): from the list, a point mass on the token, or from the
    native sampler's slot that holds it."""
    if q == Q_POINT_MASS:
        out = np.zeros(sampler.n_vocab)
        out[draft[i]] = 1.0
        return out
    return sampler.slot_probs(i) if q is None or q == Q_IN_SLOTS else np.asarray(q[i], dtype=np.float64)


def as_verify(rule, sampler):
    """A rule written as rule(sampler, target_rows, draft, q, history) -> (n_accepted, token), in
    Sampler.verify's place (the masks and the options it is also given go unused)."""

    def verify(target_rows, draft, q, history, **_options):
        return Verdict(*rule(sampler, target_rows, draft, q, history))

    return verify


# The wrong rules run on the same native transform (Sampler.probs) and read the drafters' q
# from the same native slots as the real rule; only the rule itself is written here.


def _residual_ignored(self, target_rows, draft, draft_probs, history):
    """Wrong: accept with probability min(1, p/q), but on a rejection draw from p instead of
    normalize(max(0, p - q)) -- the rejected token can come back, too often."""
    for i, d in enumerate(draft):
        p = self.probs(target_rows[i], history + list(draft[:i]))
        if self.rng.random() * q_of(self, draft_probs, i, draft)[d] < p[d]:
            continue
        return i, draw(self.rng, p)
    return len(draft), draw(self.rng, self.probs(target_rows[len(draft)], history + list(draft)))


def _ratio_inverted(self, target_rows, draft, draft_probs, history):
    """Wrong: accept with probability min(1, q/p) (p and q swapped), then the right residual."""
    for i, d in enumerate(draft):
        p = self.probs(target_rows[i], history + list(draft[:i]))
        q = q_of(self, draft_probs, i, draft)
        if p[d] > 0 and self.rng.random() * p[d] < q[d]:
            continue
        residual = np.maximum(p - q, 0.0)
        return i, draw(self.rng, residual / residual.sum() if residual.sum() > 0 else p)
    return len(draft), draw(self.rng, self.probs(target_rows[len(draft)], history + list(draft)))


def _penalty_ignored(self, target_rows, draft, draft_probs, history):
    """Wrong under a repetition penalty: the target's distributions are judged without it (the
    head's q still has it), so repeated tokens are accepted as often as fresh ones."""
    for i, d in enumerate(draft):
        p = self.probs(target_rows[i], [])
        q = q_of(self, draft_probs, i, draft)
        if self.rng.random() * q[d] < p[d]:
            continue
        residual = np.maximum(p - q, 0.0)
        return i, draw(self.rng, residual / residual.sum() if residual.sum() > 0 else p)
    return len(draft), draw(self.rng, self.probs(target_rows[len(draft)], history + list(draft)))


# ---- the cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    family: str
    sampling: SamplingConfig
    n_draft: int = 2
    #: the control. Drawing a rejection's replacement from p instead of the residual is the
    #: subtler error; on qwen35 the head agrees with the target so closely that it moves the
    #: distribution too little to be seen (measured p from 2e-2 to 3e-6 at 1000 samples), so
    #: that case swaps p and q instead.
    wrong_rule: object = _residual_ignored
    #: greedy tokens appended to the prompt (the repetition penalty then has something to hit)
    greedy_prefix: int = 0
    #: the setting the case is about, undone: it must change the distribution (None: no check)
    without: dict | None = None

    @property
    def depth(self) -> int:
        return self.n_draft + 1  # a full accept plus the bonus token, or a rollback and more


# The samples are seeded, which makes sampling coupled by default: these cases test speculative
# sampling's rule (rejection), the "coupled" cases the races (tests/test_coupled.py has more).
TOP_K6 = SamplingConfig(temperature=1.0, top_k=6, sampling_rule="rejection")
# flatter rows: top-p and min-p cut inside the top 10
WIDE = SamplingConfig(temperature=1.5, top_k=10, sampling_rule="rejection")
COUPLED = SamplingConfig(temperature=1.0, top_k=6, sampling_rule="coupled")
CASES = {
    "glm4moe": Case("glm4moe", TOP_K6),
    "qwen35": Case("qwen35", TOP_K6, wrong_rule=_ratio_inverted),
    "qwen3next": Case("qwen3next", TOP_K6),
    "step35": Case("step35", TOP_K6, n_draft=3),
    "top_p": Case("glm4moe", WIDE.model_copy(update={"top_p": 0.9}), without={"top_p": 1.0}),
    "min_p": Case("glm4moe", WIDE.model_copy(update={"min_p": 0.05}), without={"min_p": 0.0}),
    "repetition_penalty": Case(
        "glm4moe",
        TOP_K6.model_copy(update={"repetition_penalty": 1.5}),
        greedy_prefix=6,
        wrong_rule=_penalty_ignored,
        without={"repetition_penalty": 1.0},
    ),
    "coupled": Case("glm4moe", COUPLED),
    "coupled-qwen3next": Case("qwen3next", COUPLED),
    "coupled-top_p": Case("glm4moe", WIDE.model_copy(update={"top_p": 0.9, "sampling_rule": "coupled"})),
}


@pytest.fixture(scope="module")
def session(gguf):
    """session(family) -> a single-threaded Session private to this module."""
    cache: dict[str, pymtp.Session] = {}

    def get(family: str) -> pymtp.Session:
        if family not in cache:
            cache[family] = pymtp.load(gguf(family), n_ctx=64, n_threads=N_THREADS)
        return cache[family]

    yield get
    for s in cache.values():
        s.close()


@pytest.fixture(scope="module")
def reference(session):
    """reference(name) -> (session, prompt, exact distribution) of a case, computed once."""
    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            case = CASES[name]
            s = session(case.family)
            prompt = s.tokenize(PROMPT)
            if case.greedy_prefix:
                prompt += pymtp.generate(
                    prompt, s, max_tokens=case.greedy_prefix, speculative=False, ignore_eos=True
                ).tokens
            cache[name] = (s, prompt, exact_continuations(s.model, prompt, case.sampling, case.depth))
        return cache[name]

    return get


def _spec(case: Case) -> SpecConfig:
    return SpecConfig(n_draft=case.n_draft, adaptive=False)


@pytest.mark.parametrize("name", list(CASES))
def test_speculative_sampling_matches_plain_sampling(reference, name):
    case = CASES[name]
    s, prompt, exact = reference(name)
    assert abs(sum(exact.values()) - 1.0) < 1e-6  # float32 probabilities
    if case.without is not None:
        # the transform under test shapes the distribution (else the case would test top-k again)
        other = exact_continuations(s.model, prompt, case.sampling.model_copy(update=case.without), case.depth)
        tv = 0.5 * sum(abs(exact.get(k, 0.0) - other.get(k, 0.0)) for k in set(exact) | set(other))
        assert tv > 0.1, f"{name}: the transform moves the distribution by only {tv:.3f}"
    cov = Coverage()
    samples = sample_continuations(s, prompt, case.sampling, _spec(case), case.depth, N_SAMPLES, seed=2, coverage=cov)
    # the run went through rollbacks (and hand-offs after them), full accepts and full-length drafts
    assert cov.rejections > 50 and cov.full_accepts > 50, cov
    assert cov.drafted_at[case.n_draft] > 50 and max(cov.drafted_at) == case.n_draft, cov
    # every sample after the first starts from the cache the one before left (prefix reuse: the
    # prompt's KV is kept, the draft head cut back; hybrids resume from their prompt's snapshot)
    assert cov.reused_starts >= N_SAMPLES - 1, cov  # all when an earlier case left the prompt
    ps = p_values(samples, exact, case.depth)
    assert min(ps) > P_EXACT, f"{name}: p-values {ps} (marginals by position, then the joint)"


@pytest.mark.parametrize("name", list(CASES))
def test_a_wrong_acceptance_rule_is_detected(reference, name):
    """The same test, with the case's wrong rule in place of Sampler.verify, fails."""
    case = CASES[name]
    s, prompt, exact = reference(name)
    samples = sample_continuations(
        s, prompt, case.sampling, _spec(case), case.depth, N_SAMPLES, seed=3, verify=case.wrong_rule
    )
    ps = p_values(samples, exact, case.depth)
    assert min(ps) < P_EXACT, f"{name}: {case.wrong_rule.__name__} not detected, p-values {ps}"


@pytest.mark.parametrize("name", ["glm4moe", "repetition_penalty"])
def test_plain_sampling_matches_the_exact_distribution(reference, name):
    """The reference is what plain sampling draws (here with the repetition penalty's history)."""
    case = CASES[name]
    s, prompt, exact = reference(name)
    samples = sample_continuations(s, prompt, case.sampling, None, case.depth, N_SAMPLES, seed=1)
    ps = p_values(samples, exact, case.depth)
    assert min(ps) > P_EXACT, ps


def test_the_goodness_of_fit_test():
    """chi2_sf against known quantiles, and the test on draws from a known distribution."""
    # chi-square quantiles: P(X > x) for (dof, x)
    for dof, x, p in (
        (1, 3.841459, 0.05),
        (2, 13.81551, 1e-3),
        (5, 11.0705, 0.05),
        (10, 29.5883, 1e-3),
        (40, 55.7585, 0.05),
        (100, 149.449, 1e-3),
    ):
        assert chi2_sf(x, dof) == pytest.approx(p, rel=1e-4), (dof, x)
    probs = {0: 0.5, 1: 0.3, 2: 0.15, 3: 0.05}
    rng = np.random.default_rng(0)
    good = Counter(rng.choice(4, size=2000, p=list(probs.values())).tolist())
    bad = Counter(rng.choice(4, size=2000, p=[0.42, 0.34, 0.17, 0.07]).tolist())
    assert goodness_of_fit(good, probs) > 0.01
    assert goodness_of_fit(bad, probs) < P_EXACT
    assert goodness_of_fit(Counter({0: 10, 4: 1}), probs) == 0.0  # outside the support


# ---- two-sample helpers (tests/test_smollm2.py: the default model, no exact reference there) --------

SAMPLING = SamplingConfig(temperature=1.0, top_k=6)
P_THRESHOLD = 1e-3


def _chi2_pvalue(a: Counter, b: Counter) -> float:
    """Two-sample chi-square test of homogeneity; categories with fewer than 20 counts pooled."""
    keys = sorted(set(a) | set(b), key=lambda k: -(a[k] + b[k]))
    na, nb = sum(a.values()), sum(b.values())
    cells, rest = [], [0, 0]
    for k in keys:
        if a[k] + b[k] >= 20:
            cells.append((a[k], b[k]))
        else:
            rest[0] += a[k]
            rest[1] += b[k]
    if sum(rest):
        cells.append(tuple(rest))
    n = na + nb
    stat = 0.0
    for ca, cb in cells:
        tot = ca + cb
        for c, m in ((ca, na), (cb, nb)):
            e = tot * m / n
            stat += (c - e) ** 2 / e
    return chi2_sf(stat, len(cells) - 1) if len(cells) > 1 else 1.0


def _sample_continuations(model, spec_cfg, broken_verify=None, n=500, seed=0):
    """n 3-token continuations of PROMPT under SAMPLING (plain when spec_cfg is None)."""
    return sample_continuations(model, model.tokenize(PROMPT), SAMPLING, spec_cfg, 3, n, seed, verify=broken_verify)


def _marginals(samples: Counter, i: int) -> Counter:
    return marginal(samples, i)


def _always_accept(self, target_rows, draft, draft_probs, history):
    """A broken rule: keep every draft token, then sample the bonus token from p."""
    k = len(draft)
    return k, draw(self.rng, self.probs(target_rows[k], history + list(draft)))
