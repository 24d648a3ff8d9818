"""Drafters other than the MTP head: prompt lookup (pymtp.lookup) and one written in a few
lines against the Drafter protocol. Both are lossless: greedy equals plain greedy, and
sampling with lookup's point-mass q keeps the distribution (a wrong rule is rejected)."""

from __future__ import annotations

import numpy as np
import pytest
from test_distribution import (
    N_THREADS,
    P_EXACT,
    TOP_K6,
    Coverage,
    draw,
    exact_continuations,
    p_values,
    q_of,
    sample_continuations,
)

import pymtp
from pymtp import SamplingConfig, SpecConfig
from pymtp.drafter import Draft, Drafter
from pymtp.lookup import PromptLookupDrafter

REPEATING = "def read(path):\n    return open(path).read()\n\ndef read(path):\n"


def test_continuation_copies_what_followed_the_latest_match():
    d = PromptLookupDrafter(n_vocab=100, ngram=3)
    h = [1, 2, 3, 4, 5, 9, 2, 3, 4, 7, 8, 2, 3, 4]
    assert d.continuation(h, 2) == [7, 8]  # the latest earlier [2, 3, 4]
    assert d.continuation(h + [6], 3) == []  # 6 never occurred before
    assert d.continuation([5, 1, 5], 4) == [1, 5]  # falls back to a 1-gram
    assert PromptLookupDrafter(100, ngram=2, min_ngram=2).continuation([5, 1, 5], 4) == []
    with pytest.raises(ValueError):
        PromptLookupDrafter(100, ngram=1, min_ngram=2)


@pytest.mark.parametrize("family", ["glm4moe", "qwen35", "qwen3next", "step35", "glm4moe-nomtp"])
@pytest.mark.parametrize("n_draft", [1, 4])
def test_lookup_greedy_is_lossless(models, same_greedy, family, n_draft):
    s = models(family)
    prompt = s.tokenize(REPEATING)
    want = pymtp.generate(prompt, s, max_tokens=24, speculative=False, ignore_eos=True)
    got = pymtp.generate(
        prompt, s, max_tokens=24, ignore_eos=True, speculative={"drafter": "lookup", "n_draft": n_draft, "ngram": 2}
    )
    assert got.stats.n_drafted > 0
    same_greedy(s, prompt, got.tokens, want.tokens)


def test_lookup_on_the_tiny_model_accepts_repeated_code():
    with pymtp.load("tiny", n_ctx=512) as s:
        want = pymtp.generate(REPEATING, s, max_tokens=40, speculative=False)
        got = pymtp.generate(REPEATING, s, max_tokens=40, speculative={"drafter": "lookup", "n_draft": 8})
        assert got.tokens == want.tokens
        assert got.stats.n_accepted > 0 and got.stats.tokens_per_step > 1.2


def _accept_the_argmax(self, target_rows, draft, draft_probs, history):
    """Wrong: a draft token equal to the target's most likely token is always accepted."""
    for i, d in enumerate(draft):
        p = self.probs(target_rows[i], history + list(draft[:i]))
        q = q_of(self, draft_probs, i, draft)
        if d == int(np.argmax(p)) or self.rng.random() < p[d] / q[d]:
            continue
        residual = np.maximum(p - q, 0.0)
        return i, draw(self.rng, residual / residual.sum())
    return len(draft), draw(self.rng, self.probs(target_rows[len(draft)], history + list(draft)))


@pytest.fixture(scope="module")
def lookup_case(gguf):
    with pymtp.load(gguf("glm4moe"), n_ctx=64, n_threads=N_THREADS) as s:
        # the prompt repeats a greedy continuation of itself: lookup proposes tokens the target
        # likes, so drafts are accepted as well as rejected
        base = s.tokenize("def f(x")
        again = base[1:]
        prompt = base + pymtp.generate(base, s, max_tokens=6, speculative=False, ignore_eos=True).tokens + again
        yield s, prompt, exact_continuations(s.model, prompt, TOP_K6, 3)


def test_lookup_sampling_keeps_the_distribution(lookup_case):
    s, prompt, exact = lookup_case
    cov = Coverage()
    spec = SpecConfig(drafter="lookup", n_draft=3, ngram=2, adaptive=False)
    samples = sample_continuations(s, prompt, TOP_K6, spec, 3, 500, seed=5, coverage=cov)
    assert cov.rejections > 50 and cov.full_accepts > 50 and cov.drafted_at[2] > 50, cov  # both outcomes
    ps = p_values(samples, exact, 3)
    assert min(ps) > P_EXACT, ps
    wrong = sample_continuations(s, prompt, TOP_K6, spec, 3, 500, seed=6, verify=_accept_the_argmax)
    assert min(p_values(wrong, exact, 3)) < P_EXACT, "accepting the argmax outright was not detected"


class RepeatLast(Drafter):
    """A drafter in a few lines: guess that the last token repeats."""

    def propose(self, last_token, n_past, k, sampler, history, p_min=0.0):
        return Draft(tokens=[last_token] * k, confidence=[1.0] * k) if sampler.config.greedy else Draft()


def test_a_drafter_written_outside_pymtp_plugs_into_the_speculator(models, same_greedy):
    s = models("glm4moe")
    prompt = s.tokenize("aaaa")
    with s.lock:
        spec = pymtp.MTPSpeculator(s.target, RepeatLast(), SamplingConfig(), SpecConfig(n_draft=2))
        spec.start(prompt)
        while len(spec.tokens) < len(prompt) + 16:
            spec.step()
        got = spec.tokens[len(prompt) : len(prompt) + 16]
        assert spec.stats.n_drafted > 0
    want = pymtp.generate(prompt, s, max_tokens=16, speculative=False, ignore_eos=True).tokens
    same_greedy(s, prompt, got, want)
