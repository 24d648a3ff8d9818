"""One engine (#31): every drafter, constraint and option runs in a batch exactly as alone.

A batch and a single generation make their drafters in one factory (pymtp.drafters) and run
the same speculative step, so a batch of texts gives each text what it gets alone."""

from __future__ import annotations

import pytest

import pymtp
from pymtp import GenerationConfig, SamplingConfig, SpecConfig
from pymtp.batch import Batch
from pymtp.drafter import MTPDrafter
from pymtp.drafters import make_drafter
from pymtp.errors import UnsupportedError
from pymtp.hybrid import HybridDrafter
from pymtp.lookup import PromptLookupDrafter
from pymtp.testing.fixtures import FAMILIES, PLAIN_FAMILIES

from conftest import SAME_ROW_ATOL

#: Prompts that repeat themselves (prompt lookup finds matches) and ones that do not.
PROMPTS = ["def read(path):\n    return open(path).read()\n\ndef read(path):\n",
           "class Stack:\n    def push(self, x):\n        self.items.append(x)\n    def pop(self",
           "x = [1, 2, 3, 1, 2, 3, 1, 2", "import os\n\ndef walk("]


def _alone(model, prompt, spec, n, **kw):
    return pymtp.generate(prompt, model, max_tokens=n, ignore_eos=True, speculative=spec or False, **kw)


def _batched(model, prompts, spec, n, n_seq=None, **add_kw):
    with Batch(model, n_seq=n_seq or len(prompts), n_ctx=192, spec=spec) as b:
        items = [b.add(p, limits=GenerationConfig(max_tokens=n, ignore_eos=True), **add_kw) for p in prompts]
        b.run()
    return [it.result for it in items]


def test_the_factory_makes_every_kind(models):
    m = models("glm4moe")
    with pymtp.DraftContext(pymtp.TargetContext(m.model, n_ctx=64)) as d:
        assert isinstance(make_drafter("mtp", m.model, d), MTPDrafter)
        assert isinstance(make_drafter("lookup", m.model, d), PromptLookupDrafter)
        assert isinstance(make_drafter("hybrid", m.model, d), HybridDrafter)
        assert make_drafter(None, m.model, d) is None
        with pytest.raises(ValueError, match="unknown drafter"):
            make_drafter("eagle", m.model, d)
    plain = models("glm4moe-nomtp")
    assert isinstance(make_drafter("lookup", plain.model, None), PromptLookupDrafter)
    for kind in ("mtp", "hybrid"):
        with pytest.raises(UnsupportedError, match="no MTP blocks"):
            make_drafter(kind, plain.model, None)


@pytest.mark.parametrize("kind", ["lookup", "hybrid"])
def test_generate_a_list_drafts_with_the_drafter_asked_for(models, kind):
    """The issue's example: a list of prompts drafts with lookup (or hybrid), as one prompt does."""
    m = models("glm4moe")
    spec = {"drafter": kind, "n_draft": 4}
    one = pymtp.generate(PROMPTS[0], m, max_tokens=16, ignore_eos=True, speculative=spec)
    both = pymtp.generate([PROMPTS[0], PROMPTS[0]], m, max_tokens=16, ignore_eos=True, speculative=spec)
    assert "lookup" in one.stats.by_source
    for r in both:
        assert set(r.stats.by_source) == set(one.stats.by_source)
        assert r.stats.by_source["lookup"][0] > 0
        if SAME_ROW_ATOL == 0:
            assert r.tokens == one.tokens and r.stats.n_accepted == one.stats.n_accepted


@pytest.mark.parametrize("family", FAMILIES + PLAIN_FAMILIES)
@pytest.mark.parametrize("kind", ["mtp", "lookup", "hybrid"])
def test_every_drafter_gives_the_same_greedy_text_in_a_batch(models, same_greedy, family, kind):
    m = models(family)
    if kind != "lookup" and not m.model.mtp_loaded:
        with pytest.raises(UnsupportedError, match="no MTP blocks"):
            _batched(m, [m.tokenize(PROMPTS[0])], SpecConfig(drafter=kind), 4)
        return
    spec = SpecConfig(drafter=kind, n_draft=3, adaptive=False, ngram=2)
    prompts = [m.tokenize(p) for p in PROMPTS]
    for p, got in zip(prompts, _batched(m, prompts, spec, 20)):
        alone = _alone(m, p, spec, 20)
        same_greedy(m, p, got.tokens, alone.tokens)
        if got.tokens == alone.tokens and kind != "hybrid":       # hybrid's choice weighs timings
            assert got.stats.n_accepted == alone.stats.n_accepted
            assert got.stats.by_source == alone.stats.by_source
    same_greedy.assert_ties_rare()


def test_a_slot_changes_its_drafter_between_texts(models):
    """One slot runs an MTP text, then a lookup text, then an MTP text again: each as alone."""
    m = models("glm4moe")
    p = m.tokenize(PROMPTS[0])
    with Batch(m, n_seq=1, n_ctx=192) as b:
        for kind in ("mtp", "lookup", "mtp"):
            spec = SpecConfig(drafter=kind, n_draft=2, adaptive=False)
            it = b.add(p, spec=spec, limits=GenerationConfig(max_tokens=12, ignore_eos=True))
            b.run()
            assert it.result.tokens == _alone(m, p, spec, 12).tokens
            assert set(it.result.stats.by_source) == {kind}


def test_sampling_with_every_drafter_in_a_batch_equals_alone(models):
    """Per-text seeds: a sampled text in a batch is the one it is alone (CPU rows do not depend
    on the batch), whichever drafter drafts (not hybrid: its choice of source, and so its use of
    the RNG, weighs measured timings)."""
    if SAME_ROW_ATOL:
        pytest.skip("a GPU backend's rows depend on the batch shape")
    m = models("glm4moe")
    prompts = [m.tokenize(p) for p in PROMPTS]
    for kind in ("mtp", "lookup"):
        spec = SpecConfig(drafter=kind, n_draft=3, adaptive=False, ngram=2)
        sampling = SamplingConfig(temperature=0.8, seed=7)
        for p, got in zip(prompts, _batched(m, prompts, spec, 16, sampling=sampling)):
            assert got.tokens == _alone(m, p, spec, 16, temperature=0.8, seed=7).tokens
