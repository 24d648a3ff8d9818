"""Batched generation (pymtp.batch): several texts in one pair of contexts, drafted and verified
in shared decodes, give each text what it gets alone, on every fixture family."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAME_ROW_ATOL
from test_engine import _alone, _fresh_contexts  # noqa: F401 (an autouse fixture: fresh contexts per test)

import pymtp
from pymtp import GenerationConfig, SamplingConfig, SpecConfig
from pymtp.batch import Batch
from pymtp.errors import PymtpError, UnsupportedError
from pymtp_testing.fixtures import FAMILIES

PROMPTS = [
    "def parse(line):\n    ",
    "class Stack:\n    def",
    "import os\n\ndef walk(",
    "for i in range(10):\n",
    "x = [",
    "return self.",
]


@pytest.mark.parametrize("family", FAMILIES)
def test_batched_greedy_equals_each_text_alone(models, family, same_greedy):
    """4 texts per batch, fixed draft lengths 1-3 and the adaptive policy: each text's tokens
    equal its own greedy run (near-ties aside) and, where they are equal, so is its acceptance."""
    m = models(family)
    prompts = [m.tokenize(p) for p in PROMPTS[:4]]
    for spec in [SpecConfig(n_draft=k, adaptive=False) for k in (1, 2, 3)] + [SpecConfig(n_draft=3)]:
        with Batch(m, n_seq=4, n_ctx=128, spec=spec) as b:
            items = [b.add(p, limits=GenerationConfig(max_tokens=24, ignore_eos=True)) for p in prompts]
            assert set(b.active) == {0, 1, 2, 3}
            b.run()
        for p, it in zip(prompts, items):
            alone = _alone(m, p, spec, 24)
            same_greedy(m, p, it.result.tokens, alone.tokens)
            if it.result.tokens == alone.tokens and not spec.adaptive:
                assert it.result.stats.n_accepted == alone.stats.n_accepted
            assert it.result.finish_reason == "length"
    same_greedy.assert_ties_rare()


def test_batched_drafts_with_a_trimmed_vocabulary(models, same_greedy):
    """A trimmed draft vocabulary (the default on real vocabularies) in batched drafts: every
    text's output rows are projected on the chosen tokens, and each text gets what it gets alone."""
    m = models("glm4moe")
    prompts = [m.tokenize(p) for p in PROMPTS[:4]]
    for k in (1, 3):
        spec = SpecConfig(n_draft=k, adaptive=False, draft_vocab=64)
        with Batch(m, n_seq=4, n_ctx=128, spec=spec) as b:
            items = [b.add(p, limits=GenerationConfig(max_tokens=20, ignore_eos=True)) for p in prompts]
            assert 64 <= items[0].speculator.drafter.vocab_size < m.n_vocab // 2
            b.run()
        for p, it in zip(prompts, items):
            alone = _alone(m, p, spec, 20)
            assert it.result.stats.draft_vocab == alone.stats.draft_vocab == items[0].speculator.drafter.vocab_size
            same_greedy(m, p, it.result.tokens, alone.tokens)
            if it.result.tokens == alone.tokens:
                assert it.result.stats.n_accepted == alone.stats.n_accepted


def test_one_draft_decode_per_position_and_one_verify_per_step(models, monkeypatch):
    """The shared decodes: per step, one target decode for all texts, and one draft decode
    per draft position (plus one that feeds queues before longer drafts)."""
    m = models("glm4moe")
    calls = {"target": 0, "draft": 0, "single": 0}
    with Batch(m, n_seq=3, n_ctx=128, spec=SpecConfig(n_draft=1, adaptive=False)) as b:
        items = [b.add(m.tokenize(p), limits=GenerationConfig(max_tokens=16, ignore_eos=True)) for p in PROMPTS[:3]]
        real_t, real_d = b.target.decode_rows, b.draft.decode_rows

        def count(name, fn):
            def wrapped(*a, **kw):
                calls[name] += 1
                return fn(*a, **kw)

            return wrapped

        monkeypatch.setattr(b.target, "decode_rows", count("target", real_t))
        monkeypatch.setattr(b.draft, "decode_rows", count("draft", real_d))
        monkeypatch.setattr(b.target, "decode", count("single", b.target.decode))
        monkeypatch.setattr(b.draft, "decode", count("single", b.draft.decode))
        n_steps = 0
        while b.active:
            b.step()
            n_steps += 1
    assert calls["single"] == 0
    assert calls["target"] == n_steps
    assert calls["draft"] <= n_steps  # k=1: one draft decode per step (none once a text's head has no row)
    assert all(it.result.stats.n_drafted > 0 for it in items)


def test_sampling_per_text_seed_and_settings(models):
    """Each text keeps its own sampling settings and RNG: with the same seeds, a batch gives
    what each text gives alone (the CPU backend's rows do not depend on the batch)."""
    m = models("glm4moe")
    settings = [
        dict(temperature=0.9, seed=1),
        dict(temperature=0.7, top_k=20, seed=2),
        dict(temperature=1.0, top_p=0.9, seed=3),
        dict(temperature=0.0),
    ]
    spec = SpecConfig(n_draft=2, adaptive=False)
    prompts = [m.tokenize(p) for p in PROMPTS[:4]]
    with Batch(m, n_seq=4, n_ctx=128, spec=spec) as b:
        items = [
            b.add(p, sampling=SamplingConfig(**kw), limits=GenerationConfig(max_tokens=20, ignore_eos=True))
            for p, kw in zip(prompts, settings)
        ]
        b.run()
    for p, kw, it in zip(prompts, settings, items):
        alone = _alone(m, p, spec, 20, **kw)
        if SAME_ROW_ATOL == 0:
            assert it.result.tokens == alone.tokens
        assert len(it.result.tokens) == 20


def test_continuous_batching_joins_and_leaves(models):
    """Six texts through two slots, of different lengths and stop strings: a text joins as soon
    as one leaves, and each equals its run alone."""
    m = models("glm4moe")
    spec = SpecConfig(n_draft=2, adaptive=False)
    lengths = [5, 30, 12, 3, 20, 8]
    pending = [(m.tokenize(p), n) for p, n in zip(PROMPTS, lengths)]
    done, joined_at = [], []
    with Batch(m, n_seq=2, n_ctx=128, spec=spec) as b:
        step = 0
        while pending or b.active:
            while pending and b.free:
                p, n = pending.pop(0)
                done.append((p, n, b.add(p, limits=GenerationConfig(max_tokens=n, ignore_eos=True))))
                joined_at.append(step)
            b.step()
            step += 1
    assert joined_at[2] < step and joined_at[2] > 0  # the third joined while the long one ran
    for p, n, it in done:
        alone = _alone(m, p, spec, n)
        assert it.result.tokens == alone.tokens and len(it.result.tokens) == n


def test_stop_strings_and_cancel(models):
    m = models("glm4moe")
    with Batch(m, n_seq=2, n_ctx=128, spec=SpecConfig(n_draft=2)) as b:
        p = m.tokenize(PROMPTS[0])
        alone = _alone(m, p, SpecConfig(n_draft=2), 40)
        stop = alone.text[10:13]
        a = b.add(p, limits=GenerationConfig(max_tokens=40, stop=(stop,), ignore_eos=True))
        c = b.add(m.tokenize(PROMPTS[1]), limits=GenerationConfig(max_tokens=40, ignore_eos=True))
        b.step()
        b.cancel(c)
        assert c.finished and c.result.finish_reason == "cancelled" and c.seq_id not in b.active
        b.run()
    assert a.result.finish_reason == "stop" and a.result.text == alone.text[: alone.text.index(stop)]


def test_a_slot_reuses_its_last_texts_prefix(models):
    """A new text goes to the free slot whose cached text shares its prompt, and decodes only
    the rest; the output is the same as from scratch."""
    m = models("glm4moe")
    spec = SpecConfig(n_draft=2, adaptive=False)
    with Batch(m, n_seq=3, n_ctx=256, spec=spec) as b:
        first = [b.add(m.tokenize(p), limits=GenerationConfig(max_tokens=10, ignore_eos=True)) for p in PROMPTS[:3]]
        b.run()
        follow = first[1].prompt + first[1].result.tokens + m.tokenize(" more", add_special=False)
        again = b.add(follow, limits=GenerationConfig(max_tokens=10, ignore_eos=True))
        b.run()
    assert again.seq_id == first[1].seq_id
    assert again.result.stats.n_reused >= len(first[1].prompt)
    assert again.result.tokens == _alone(m, follow, spec, 10).tokens


def test_plain_batched_decoding(models):
    m = models("glm4moe")
    prompts = [m.tokenize(p) for p in PROMPTS[:3]]
    with Batch(m, n_seq=3, n_ctx=128, spec=None) as b:
        items = [b.add(p, limits=GenerationConfig(max_tokens=12, ignore_eos=True)) for p in prompts]
        b.run()
    for p, it in zip(prompts, items):
        assert it.result.tokens == _alone(m, p, None, 12).tokens
        assert it.result.stats.n_drafted == 0


def test_generate_takes_a_list_of_prompts(models):
    m = models("glm4moe")
    rs = pymtp.generate(PROMPTS[:5], m, max_tokens=8, ignore_eos=True, speculative={"n_draft": 2})
    assert isinstance(rs, list) and len(rs) == 5
    for p, r in zip(PROMPTS, rs):
        assert r.tokens == pymtp.generate(p, m, max_tokens=8, ignore_eos=True, speculative={"n_draft": 2}).tokens
    toks = [m.tokenize(p) for p in PROMPTS[:2]]
    assert [r.tokens for r in pymtp.generate(toks, m, max_tokens=4, ignore_eos=True)] == [
        pymtp.generate(t, m, max_tokens=4, ignore_eos=True).tokens for t in toks
    ]
    with pytest.raises(ValueError, match="empty"):
        pymtp.generate([], m)


def test_batch_limits_are_errors_not_crashes(models):
    m = models("glm4moe")
    with Batch(m, n_seq=1, n_ctx=64, spec=SpecConfig(n_draft=2)) as b:
        b.add(m.tokenize(PROMPTS[0]), limits=GenerationConfig(max_tokens=4))
        with pytest.raises(UnsupportedError, match="slots are busy"):
            b.add(m.tokenize(PROMPTS[1]))
        with pytest.raises(ValueError, match="n_seq"):
            Batch(m, n_seq=0)
    with Batch(m, n_seq=2, n_ctx=32, spec=SpecConfig(n_draft=2)) as b:
        with pytest.raises(ValueError, match="context of a slot holds 32"):
            b.add(list(range(1, 40)))
        it = b.add(m.tokenize(PROMPTS[0]), limits=GenerationConfig(max_tokens=100, ignore_eos=True))
        b.run()
        assert it.result.finish_reason == "context"


def test_decode_rows_checks_its_rows(models):
    """The native multi-sequence decode refuses bad rows with an exception, and a batch of two
    sequences gives each the logits it gets alone."""
    m = models("glm4moe")
    toks = m.tokenize(PROMPTS[0])
    with pymtp.TargetContext(m.model, n_ctx=256, n_seq_max=2) as t:
        with pytest.raises(PymtpError, match="seq_id 2 out of range"):
            t.decode_rows([1, 2], [0, 1], [0, 2])
        with pytest.raises(PymtpError, match="does not continue sequence 0"):
            t.decode_rows([1, 2], [0, 2], [0, 0])
        with pytest.raises(ValueError, match="same length"):
            t.decode_rows([1, 2], [0], [0, 0])
        n = len(toks)
        t.decode_rows(toks + toks[:5], list(range(n)) + list(range(5)), [0] * n + [1] * 5)
        both = t.logits().copy()
        assert both.shape == (n + 5, m.n_vocab) and t.hidden().shape == (n + 5, m.n_embd)
    with pymtp.TargetContext(m.model, n_ctx=256) as t:
        t.decode(toks, 0)
        alone = t.logits().copy()
    np.testing.assert_allclose(both[:n], alone, rtol=0, atol=SAME_ROW_ATOL)
    np.testing.assert_allclose(both[n:], alone[:5], rtol=0, atol=SAME_ROW_ATOL)


@pytest.mark.parametrize("k", [1, 3])
def test_long_prompts_admitted_together_feed_the_head_in_n_batch_pieces(models, same_greedy, k):
    """Two prompts whose unseen head inputs together exceed n_batch (a server admitting two long
    requests at once): the first step's draft decode is split, and each text equals its run alone."""
    m = models("glm4moe")
    text = " ".join(f"item{i} = value{i * 7 % 13}" for i in range(40))
    prompts = [m.tokenize(text)[:50], m.tokenize("x = " + text)[:50]]
    spec = SpecConfig(n_draft=k, adaptive=False)
    with Batch(m, n_seq=2, n_ctx=256, n_batch=64, spec=spec) as b:
        items = [b.add(p, limits=GenerationConfig(max_tokens=12, ignore_eos=True)) for p in prompts]
        b.run()
    for p, it in zip(prompts, items):
        assert it.result.finish_reason == "length"
        same_greedy(m, p, it.result.tokens, _alone(m, p, spec, 12).tokens)
