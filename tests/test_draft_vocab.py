"""The trimmed draft vocabulary (SpecConfig.draft_vocab, DraftContext.set_vocab): the head scores
only N tokens. The projection is pymtp's own (draft_vocab.cpp) over the hidden row it captures
from llama.cpp's graph, so: over the whole vocabulary it must equal llama.cpp's logits bit for
bit; greedy speculation stays lossless; sampling keeps the distribution (q is zero outside the
set, the residual covers it); models that cannot trim fall back to the whole vocabulary."""

from __future__ import annotations

import numpy as np
import pytest
from test_distribution import (
    N_SAMPLES,
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
from pymtp import SpecConfig
from pymtp.draft_vocab import frequent_tokens, token_counts
from pymtp_testing.draft_decodes import head_rows

TRIMMING = ["glm4moe", "qwen35", "qwen35moe", "deepseek2"]
NOT_TRIMMING = ["step35", "mimo2", "qwen3next"]  # chained heads; a graph that cuts the rows


@pytest.mark.parametrize("family", TRIMMING)
def test_the_whole_vocabulary_through_the_trimmed_path_equals_llamas_logits(models, family):
    s = models(family)
    full = head_rows(s, [])
    trimmed = head_rows(s, np.arange(s.model.n_vocab))
    for (a_logits, a_hidden), (b_logits, b_hidden) in zip(full, trimmed):
        np.testing.assert_array_equal(b_hidden, a_hidden)
        # the same rows, through a one-row product here and a many-row one in llama.cpp
        np.testing.assert_allclose(b_logits, a_logits, rtol=0, atol=2e-2)
        assert b_logits.argmax() == a_logits.argmax()


def test_a_trimmed_row_is_minus_infinity_outside_the_set(models):
    s = models("glm4moe")
    keep = np.arange(10, s.model.n_vocab, 3)
    (logits, _), _ = head_rows(s, keep)
    (full, _), _ = head_rows(s, np.arange(s.model.n_vocab))  # the same kernel, every row
    outside = np.setdiff1d(np.arange(s.model.n_vocab), keep)
    assert np.all(np.isneginf(logits[outside]))
    np.testing.assert_array_equal(logits[keep], full[keep])


def test_bad_vocabularies_are_refused(models):
    s = models("glm4moe")
    with pymtp.TargetContext(s.model, n_ctx=32, n_threads=1) as t, pymtp.DraftContext(t, n_threads=1) as d:
        with pytest.raises(ValueError, match="token ids"):
            d.set_vocab([1, s.model.n_vocab])
        d.set_vocab([5, 5, 7])  # duplicates collapse
        assert d.vocab_size == 2
        d.set_vocab([])
        assert d.vocab_size == 0


@pytest.mark.parametrize("family", TRIMMING + NOT_TRIMMING)
@pytest.mark.parametrize("n_draft", [1, 3])
def test_greedy_speculation_with_a_trimmed_vocabulary_is_lossless(models, same_greedy, family, n_draft):
    s = models(family)
    prompt = s.tokenize("def f(x):\n    return x + 1\n\ndef g(y):\n")
    want = pymtp.generate(prompt, s, max_tokens=24, speculative=False, ignore_eos=True)
    got = pymtp.generate(
        prompt, s, max_tokens=24, ignore_eos=True, speculative={"n_draft": n_draft, "draft_vocab": 100}
    )
    same_greedy(s, prompt, got.tokens, want.tokens)
    assert got.stats.draft_vocab == (0 if family in NOT_TRIMMING else len(frequent_tokens(s.model, 100)))


def test_sampling_with_a_trimmed_vocabulary_keeps_the_distribution(gguf):
    """Top-k 6 sampling where the head drafts from 160 of the 304 tokens only: some of the
    target's likely tokens are outside, and reach the output through the residual."""
    with pymtp.load(gguf("glm4moe"), n_ctx=64, n_threads=N_THREADS) as s:
        prompt = s.tokenize("def f(x")
        exact = exact_continuations(s.model, prompt, TOP_K6, 3)
        spec = SpecConfig(n_draft=2, adaptive=False, draft_vocab=160)
        cov = Coverage()
        samples = sample_continuations(s, prompt, TOP_K6, spec, 3, N_SAMPLES, seed=8, coverage=cov)
        assert cov.rejections > 50 and cov.full_accepts > 10, cov
        kept = set(frequent_tokens(s.model, 160).tolist())
        assert any(t not in kept for key in samples for t in key)  # emitted, never drafted
        assert min(p_values(samples, exact, 3)) > P_EXACT
        wrong = sample_continuations(
            s, prompt, TOP_K6, spec, 3, N_SAMPLES, seed=9, verify=_residual_within(np.array(sorted(kept)))
        )
        assert min(p_values(wrong, exact, 3)) < P_EXACT


def _residual_within(kept: np.ndarray):
    """Wrong: a rejection draws its replacement only among the tokens the head could draft."""

    def verify(self, target_rows, draft, draft_probs, history):
        for i, d in enumerate(draft):
            p = self.probs(target_rows[i], history + list(draft[:i]))
            q = q_of(self, draft_probs, i, draft)
            if self.rng.random() * q[d] < p[d]:
                continue
            residual = np.zeros_like(p)
            residual[kept] = np.maximum(p - q, 0.0)[kept]
            return i, draw(self.rng, residual if residual.sum() > 0 else p)
        return len(draft), draw(self.rng, self.probs(target_rows[len(draft)], history + list(draft)))

    return verify


def test_frequent_tokens(models):
    s = models("glm4moe")
    counts = token_counts(s.model)
    assert counts.shape == (s.model.n_vocab,) and counts.sum() > 10_000
    ids = frequent_tokens(s.model, 50)
    assert np.all(np.diff(ids) > 0)
    eog = {t for t in (s.model.eos, s.model.eot) if t is not None}
    assert eog <= set(ids.tolist())
    top = set(np.argsort(-counts, kind="stable")[:50].tolist())
    assert top <= set(ids.tolist()) and len(ids) == len(top | eog)
    assert len(frequent_tokens(s.model, s.model.n_vocab)) == s.model.n_vocab
