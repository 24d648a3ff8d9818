"""The trimmed draft vocabulary on a quantized head (issue #28, the ~1.5B echo fixture's Q6_K
output matrix): the chosen rows are kept in the head matrix's own type, so a draft token reads
0.82 bytes a weight instead of an F16 copy's 2, and each chosen logit is bitwise the one the
whole projection gives (the same blocks through the same kernel). Greedy speculation stays
lossless. A small echo fixture in Q4_K_M has the fixture's types (Q6_K output, Q4_K blocks)."""

from __future__ import annotations

import numpy as np
import pytest

import pymtp
from pymtp import SpecConfig
from pymtp.bench.echo import EchoShape, make_echo
from pymtp_testing.draft_decodes import after_catch_up, head_rows

# K-quants need widths that are multiples of 256
SHAPE = EchoShape(n_embd=512, n_layer=2, n_head=8, n_head_kv=2, head_dim=64, n_ff=512, n_vocab=1024, n_expert=4)


@pytest.fixture(scope="module")
def q4km(tmp_path_factory):
    path = make_echo(tmp_path_factory.mktemp("echo") / "echo-q4km.gguf", 0.8, shape=SHAPE, type="Q4_K_M")
    with pymtp.load(path, n_ctx=128, n_threads=1) as s:
        yield s


def test_the_fixture_head_is_q6_k(q4km):
    from gguf import GGUFReader

    types = {t.name: t.tensor_type.name for t in GGUFReader(q4km.model.path).tensors}
    assert types["output.weight"] == "Q6_K"


def test_trimmed_logits_of_a_quantized_head_are_the_whole_projections_bits(q4km):
    _, (full, _) = head_rows(q4km, [])  # the recursion's step: a one-row draft decode
    keep = np.arange(3, q4km.model.n_vocab, 2)
    _, (trimmed, _) = head_rows(q4km, keep)
    assert np.isfinite(full).all()
    # an F16 copy of the Q6_K rows differs in the last bits (about 1e-3 here)
    np.testing.assert_array_equal(trimmed[keep], full[keep])
    assert np.all(np.isneginf(np.delete(trimmed, keep)))


@pytest.mark.parametrize("n_draft", [1, 3])
def test_greedy_speculation_on_a_trimmed_quantized_head_is_lossless(q4km, same_greedy, n_draft):
    prompt = q4km.tokenize("the quick brown fox")
    want = pymtp.generate(prompt, q4km, max_tokens=24, speculative=False, ignore_eos=True)
    got = pymtp.generate(
        prompt, q4km, max_tokens=24, ignore_eos=True, speculative=SpecConfig(n_draft=n_draft, draft_vocab=400)
    )
    same_greedy(q4km, prompt, got.tokens, want.tokens)
    assert got.stats.draft_vocab >= 400
    assert got.stats.n_accepted > 0


@pytest.mark.parametrize("trimmed", [False, True])
def test_a_catch_up_without_outputs_writes_the_same_kv(q4km, trimmed):
    vocab = np.arange(0, q4km.model.n_vocab, 3) if trimmed else []
    every_row = after_catch_up(q4km, True, vocab)
    kv_only = after_catch_up(q4km, False, vocab)
    for a, b in zip(every_row, kv_only):
        np.testing.assert_array_equal(b, a)
