"""MTPSpeculator: lossless greedy speculation, stats, the step API, chained heads."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from conftest import SAME_ROW_ATOL

import pymtp
from pymtp import MTPSpeculator, SamplingConfig, SpecConfig
from pymtp_testing.fixtures import FAMILIES

WORDS = (
    "def",
    "class",
    "return",
    "import",
    "self",
    "the",
    "fox",
    "(",
    ")",
    ":",
    "\n",
    "    ",
    "x",
    "=",
    "1",
    "é",
    "✓",
    "data",
    "for",
    "in",
    "if",
    "else",
    "print",
    "#",
    "[",
    "]",
    ",",
    "0",
    "None",
    "lambda",
)


def prompts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = 1 + int(rng.integers(0, 12))
        out.append(" ".join(rng.choice(WORDS, size=k)) if i % 7 else WORDS[i % len(WORDS)])
    return out


N_TOKENS = 24


def _plain(model, text):
    return pymtp.generate(text, model, max_tokens=N_TOKENS, speculative=False, ignore_eos=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_speculation_is_lossless(models, family, same_greedy):
    """Speculative greedy output equals plain greedy output token for token (up to near-ties of
    the target's logits, conftest.GreedyComparison): 50 prompts x draft lengths 1-4, fixed
    lengths (most rollbacks) and the adaptive policy."""
    model = models(family)
    configs = [SpecConfig(n_draft=k, adaptive=False) for k in (1, 2, 3, 4)]
    configs.append(SpecConfig(n_draft=4, adaptive=True, cooldown=2, cooldown_steps=2, p_min=0.2))
    total = Counter()
    for text in prompts(50):
        plain = _plain(model, text)
        for cfg in configs:
            r = pymtp.generate(text, model, max_tokens=N_TOKENS, speculative=cfg, ignore_eos=True)
            same_greedy(model, plain.prompt_tokens, r.tokens, plain.tokens)
            total["drafted"] += r.stats.n_drafted
            total["accepted"] += r.stats.n_accepted
            total["rejections"] += sum(1 for d, a in zip(r.stats.drafted_at, r.stats.accepted_at) if a < d)
    same_greedy.assert_ties_rare()
    # the runs exercised both paths: accepted drafts and rollbacks
    assert 0 < total["accepted"] < total["drafted"]
    assert total["rejections"] > 50


def test_greedy_lossless_with_a_prompt_longer_than_the_batch(gguf, same_greedy):
    """Prompts longer than n_batch (512) prefill in chunks; the hand-off stays in step."""
    model = pymtp.load(gguf("glm4moe"), n_ctx=2048)
    text = " ".join(prompts(40, seed=3)) * 2
    assert 512 < len(model.tokenize(text)) < 2000
    plain = _plain(model, text)
    r = pymtp.generate(text, model, max_tokens=N_TOKENS, speculative=SpecConfig(n_draft=3), ignore_eos=True)
    same_greedy(model, plain.prompt_tokens, r.tokens, plain.tokens)
    assert r.stats.n_accepted > 0
    model.close()


def test_greedy_lossless_with_repetition_penalty(models, same_greedy):
    model = models("qwen35")
    for text in prompts(10, seed=5):
        plain = pymtp.generate(
            text, model, max_tokens=N_TOKENS, speculative=False, ignore_eos=True, repetition_penalty=1.3
        )
        spec = pymtp.generate(
            text, model, max_tokens=N_TOKENS, speculative=SpecConfig(n_draft=3), ignore_eos=True, repetition_penalty=1.3
        )
        same_greedy(model, plain.prompt_tokens, spec.tokens, plain.tokens, repetition_penalty=1.3)


@pytest.mark.parametrize("family", ["glm4moe", "step35", "qwen35"])
def test_stats_are_exact(models, family):
    model = models(family)
    r = pymtp.generate(
        "def f(x):", model, max_tokens=40, speculative=SpecConfig(n_draft=3, adaptive=False), ignore_eos=True
    )
    s = r.stats
    assert r.finish_reason == "length" and len(r.tokens) == 40
    # every step emits its accepted drafts plus one token of the target's
    assert s.n_emitted == sum(s.accepted_at) + s.n_steps == len(r.tokens)
    assert s.n_accepted == sum(s.accepted_at) and s.n_drafted == sum(s.drafted_at)
    assert all(a <= d for a, d in zip(s.accepted_at, s.drafted_at))
    assert s.drafted_at == sorted(s.drafted_at, reverse=True)  # position i+1 needs position i
    assert 0 <= s.acceptance_rate <= 1 and s.tokens_per_second > 0
    assert s.t_draft > 0 and s.t_verify > 0 and s.t_python >= 0
    assert s.t_draft + s.t_verify <= s.t_total + 1e-9


def test_step_by_step_api(models, same_greedy):
    model = models("glm4moe")
    with model.lock:
        s = model
        spec = MTPSpeculator(s.target, s.draft, SamplingConfig(), SpecConfig(n_draft=2, adaptive=False))
        prompt = model.tokenize("import os\n")
        spec.start(prompt)
        assert spec.n_past == len(prompt) - 1
        results = [spec.step() for _ in range(5)]
    for r in results:
        assert 1 <= len(r.emitted) <= 3 and len(r.drafted) <= 2
        assert r.emitted[: r.n_accepted] == r.drafted[: r.n_accepted]
    assert spec.tokens[len(prompt) :] == [t for r in results for t in r.emitted]
    plain = pymtp.generate(prompt, model, max_tokens=len(spec.tokens) - len(prompt), speculative=False, ignore_eos=True)
    same_greedy(model, prompt, spec.tokens[len(prompt) :], plain.tokens)


# Stochastic speculation (same distribution as plain sampling): tests/test_distribution.py.
# The sampler's rules: tests/test_sampling.py. DraftPolicy: tests/test_drafter.py.


@pytest.mark.parametrize("family", ["step35", "mimo2"])
def test_chained_heads_cap_the_draft(models, family):
    """Chained heads draft one token per head: asked for 8, a step drafts exactly the head count
    (fixed length, no confidence stop, no cooldown), never more, and drafts are accepted."""
    model = models(family)
    n_heads = model.n_mtp_layers
    assert n_heads == 3
    r = pymtp.generate(
        "x = 1", model, max_tokens=30, speculative=SpecConfig(n_draft=8, adaptive=False), ignore_eos=True
    )
    s = r.stats
    # drafted_at[i]: steps that drafted at least i + 1 tokens
    assert len(s.drafted_at) == n_heads
    # every step drafts in full but the last few, which max_tokens cuts short
    assert s.drafted_at[-1] >= s.n_steps - 3 and s.drafted_at[-1] >= 5
    assert s.n_accepted > 0


def test_greedy_speculation_is_lossless_on_the_tiny_model(same_greedy):
    """The tiny trained model (F16 weights, real acceptance): 50 prompts x draft lengths 1-4 and
    the default policy give plain greedy output token for token (up to near-ties)."""
    model = pymtp.load("tiny")
    configs = [SpecConfig(n_draft=k, adaptive=False) for k in (1, 2, 3, 4)] + [SpecConfig()]
    drafted = accepted = 0
    for text in prompts(50, seed=11):
        plain = pymtp.generate(text, model, max_tokens=32, speculative=False, ignore_eos=True)
        for cfg in configs:
            r = pymtp.generate(text, model, max_tokens=32, speculative=cfg, ignore_eos=True)
            same_greedy(model, plain.prompt_tokens, r.tokens, plain.tokens)
            drafted += r.stats.n_drafted
            accepted += r.stats.n_accepted
    same_greedy.assert_ties_rare()
    assert 0.3 < accepted / drafted < 0.95
    model.close()


def test_logprobs_are_the_targets_with_and_without_speculation(models):
    """result.logprobs: log p of each emitted token, p the target's distribution (greedy: the softmax
    of the row); speculation reads it from the verify rows, plain decoding from single rows."""
    import math

    import numpy as np

    from pymtp.model import last_row_only

    s = models("glm4moe")
    prompt = s.tokenize("def f(x):\n    return")
    plain = pymtp.generate(prompt, s, max_tokens=10, speculative=False, ignore_eos=True, logprobs=True)
    spec = pymtp.generate(prompt, s, max_tokens=10, speculative={"n_draft": 3}, ignore_eos=True, logprobs=True)
    assert spec.tokens == plain.tokens and len(spec.logprobs) == len(spec.tokens)
    assert spec.stats.n_accepted > 0
    np.testing.assert_allclose(spec.logprobs, plain.logprobs, atol=max(1e-3, SAME_ROW_ATOL))
    with pymtp.TargetContext(s.model, n_ctx=64, n_threads=1) as t:
        t.decode(prompt, 0, output=last_row_only(len(prompt)))
        x = t.logits()[-1].astype(np.float64)
        want = x[plain.tokens[0]] - x.max() - math.log(np.exp(x - x.max()).sum())
    # a fresh decode of the prompt: the same row, up to the GPU backends' batch-shape rounding
    assert abs(plain.logprobs[0] - want) < max(1e-4, SAME_ROW_ATOL)
    assert pymtp.generate(prompt, s, max_tokens=3, speculative=False).logprobs is None


def test_top_logprobs_are_the_rows_likeliest_tokens(models):
    """top_logprobs=n: per token, its row's n likeliest tokens with log p, likeliest first; the
    same with and without speculation; greedy: the chosen token first, at its logprob; a numpy
    log-softmax of the first row agrees; sampling (top-k 6): at most 6, summing to 1."""
    import numpy as np

    from pymtp.model import last_row_only

    s = models("glm4moe")
    prompt = s.tokenize("def f(x):\n    return")
    plain = pymtp.generate(prompt, s, max_tokens=10, speculative=False, ignore_eos=True, top_logprobs=5)
    spec = pymtp.generate(prompt, s, max_tokens=10, speculative={"n_draft": 3}, ignore_eos=True, top_logprobs=5)
    assert spec.stats.n_accepted > 0 and spec.tokens == plain.tokens
    assert len(spec.top_logprobs) == len(spec.tokens) and spec.logprobs is not None
    for tok, lp, top, ptop in zip(spec.tokens, spec.logprobs, spec.top_logprobs, plain.top_logprobs):
        assert len(top) == 5 and [t for t, _ in top] == [t for t, _ in ptop]
        np.testing.assert_allclose([v for _, v in top], [v for _, v in ptop], atol=max(1e-3, SAME_ROW_ATOL))
        assert top[0][0] == tok and abs(top[0][1] - lp) < 1e-4
        assert all(a[1] >= b[1] for a, b in zip(top, top[1:]))
    with pymtp.TargetContext(s.model, n_ctx=64, n_threads=1) as t:
        t.decode(prompt, 0, output=last_row_only(len(prompt)))
        x = t.logits()[-1].astype(np.float64)
    lsm = x - x.max() - np.log(np.exp(x - x.max()).sum())
    want = np.argsort(-lsm, kind="stable")[:5]
    assert [t for t, _ in plain.top_logprobs[0]] == list(want)
    np.testing.assert_allclose([v for _, v in plain.top_logprobs[0]], lsm[want], atol=max(1e-4, SAME_ROW_ATOL))
    sampled = pymtp.generate(
        prompt, s, max_tokens=8, temperature=0.8, top_k=6, seed=3, top_logprobs=20, speculative={"n_draft": 3}
    )
    for tok, top in zip(sampled.tokens, sampled.top_logprobs):
        assert 1 <= len(top) <= 6 and tok in [t for t, _ in top]
        assert abs(sum(np.exp(v) for _, v in top) - 1.0) < 1e-4
    with pytest.raises(ValueError, match="top_logprobs"):
        pymtp.generate(prompt, s, max_tokens=2, top_logprobs=21)
    assert pymtp.generate(prompt, s, max_tokens=2).top_logprobs is None


@pytest.mark.parametrize("family", ["step35", "mimo2"])
def test_chained_models_drafting_with_head_0_are_lossless(models, family, same_greedy):
    """heads="first": head 0 drafts every token of drafts longer than the head count; greedy
    output equals plain decoding, alone and in a batch."""
    from pymtp import Batch, GenerationConfig

    model = models(family)
    texts = [model.tokenize(t) for t in prompts(6)]
    longest = 0
    for k in (1, 3, 5):
        cfg = SpecConfig(n_draft=k, adaptive=False, heads="first")
        for p in texts:
            plain = _plain(model, p)
            r = pymtp.generate(p, model, max_tokens=N_TOKENS, speculative=cfg, ignore_eos=True)
            same_greedy(model, p, r.tokens, plain.tokens)
            longest = max(longest, max((i + 1 for i, n in enumerate(r.stats.drafted_at) if n), default=0))
        with Batch(model, n_seq=3, n_ctx=128, spec=cfg) as b:
            items = [b.add(p, limits=GenerationConfig(max_tokens=N_TOKENS, ignore_eos=True)) for p in texts[:3]]
            b.run()
        for p, it in zip(texts, items):
            same_greedy(model, p, it.result.tokens, _plain(model, p).tokens)
    assert longest == 5 > model.model.n_mtp_layers
