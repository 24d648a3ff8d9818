"""Coupled sampling (SamplingConfig.sampling_rule, the default when a seed is given): every token
is the winner of an exponential race keyed by (seed, position), and a draft token is kept only
when it is that winner. So on a CPU build (rows bit-exact in any batch) a seeded sampled
generation is the same text speculative or not, whatever drafted it, the draft lengths the
auto policy chose from measured seconds, or the batch it was decoded in.

The rejection rule (speculative sampling) is exact in distribution only: the last test shows
the same comparison parting there, so the ones above could fail."""

from __future__ import annotations

import pytest
from conftest import GPU_BUILD

import pymtp

pytestmark = pytest.mark.skipif(GPU_BUILD, reason="token-for-token equality needs the CPU build's bit-exact rows")

PROMPTS = ("The quick brown fox", "a b c a b c a b c a b", "Once upon a time")
SAMPLING = dict(temperature=1.0, top_k=8, max_tokens=24, ignore_eos=True)
#: every way of drafting: fixed lengths, the auto policy, chained heads' first head, lookup, both
SPECS = (
    {"policy": "fixed", "n_draft": 1},
    {"policy": "fixed", "n_draft": 4},
    True,
    {"drafter": "lookup", "policy": "fixed", "n_draft": 3},
    {"drafter": "hybrid", "policy": "fixed", "n_draft": 2},
)


@pytest.mark.parametrize("family", ["glm4moe", "qwen35", "qwen3next", "step35"])
def test_a_seed_gives_the_plain_tokens_whatever_drafts_them(models, family):
    m = models(family)
    kept = 0
    for seed, prompt in enumerate(PROMPTS):
        want = pymtp.generate(prompt, m, seed=seed, speculative=False, **SAMPLING).tokens
        for spec in SPECS:
            out = pymtp.generate(prompt, m, seed=seed, speculative=spec, **SAMPLING)
            assert out.tokens == want, (family, prompt, spec)
            kept += out.stats.n_accepted
    assert kept > 20, f"{family}: only {kept} draft tokens kept: the comparison hardly involved drafts"


def test_top_p_min_p_and_penalties_too(models):
    m = models("glm4moe")
    kw = dict(SAMPLING, top_k=0, top_p=0.9, min_p=0.02, repetition_penalty=1.3, presence_penalty=0.2)
    for seed in range(3):
        want = pymtp.generate(PROMPTS[1], m, seed=seed, speculative=False, **kw).tokens
        assert (
            pymtp.generate(PROMPTS[1], m, seed=seed, speculative={"n_draft": 3, "policy": "fixed"}, **kw).tokens == want
        )


def test_a_batch_gives_each_text_its_plain_tokens(models):
    m = models("glm4moe")
    want = [pymtp.generate(p, m, seed=9, speculative=False, **SAMPLING).tokens for p in PROMPTS]
    outs = pymtp.generate(list(PROMPTS), m, seed=9, speculative={"policy": "fixed", "n_draft": 3}, **SAMPLING)
    assert [o.tokens for o in outs] == want


def test_other_seeds_give_other_texts(models):
    m = models("glm4moe")
    texts = {tuple(pymtp.generate(PROMPTS[0], m, seed=s, speculative=False, **SAMPLING).tokens) for s in range(6)}
    assert len(texts) == 6


def test_the_rejection_rule_parts_from_plain_decoding(models):
    """The control: speculative sampling (min(1, p/q)) keeps the distribution, not the tokens;
    over a few seeds its texts differ from plain decoding's with the same seed."""
    m = models("glm4moe")
    spec = {"policy": "fixed", "n_draft": 3}
    differ = 0
    for seed in range(4):
        kw = dict(SAMPLING, seed=seed, sampling_rule="rejection")
        plain = pymtp.generate(PROMPTS[0], m, speculative=False, **kw).tokens
        differ += pymtp.generate(PROMPTS[0], m, speculative=spec, **kw).tokens != plain
    assert differ >= 2


def test_coupled_without_a_seed_draws_a_seed(models):
    m = models("glm4moe")
    kw = dict(SAMPLING, sampling_rule="coupled")
    texts = {
        tuple(pymtp.generate(PROMPTS[0], m, speculative={"n_draft": 2, "policy": "fixed"}, **kw).tokens)
        for _ in range(4)
    }
    assert len(texts) > 1
