"""pymtp.train.position_gap: the crop-reset head pass and the position bins (small torch head)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pymtp.train import position_gap  # noqa: E402
from pymtp.train.head import HeadConfig, NextNHead  # noqa: E402

CFG = HeadConfig(n_vocab=97, n_embd=48, n_head=4, n_head_kv=2, n_ff_exp=16, n_expert_shared=2)


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    head = NextNHead(CFG).eval()
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.3 * torch.randn_like(p))
    W = torch.randn(CFG.n_vocab, CFG.n_embd)
    rng = np.random.default_rng(0)
    toks = rng.integers(0, CFG.n_vocab, 40)
    hid = rng.standard_normal((40, CFG.n_embd)).astype(np.float32)
    return head, W, torch.arange(0, CFG.n_vocab, 2), toks, hid


def test_a_crop_longer_than_the_document_is_the_whole_pass(small):
    head, W, vocab, toks, hid = small
    full = position_gap.torch_head_argmax(head, W, vocab, toks, hid)
    assert full.shape == (len(toks) - 1,)
    assert set(full.tolist()) <= set(vocab.tolist())
    np.testing.assert_array_equal(position_gap.torch_head_argmax(head, W, vocab, toks, hid, crop=64), full)


def test_a_crop_resets_the_attention_there(small):
    head, W, vocab, toks, hid = small
    full = position_gap.torch_head_argmax(head, W, vocab, toks, hid)
    cut = position_gap.torch_head_argmax(head, W, vocab, toks, hid, crop=16)
    # rows 0..14 come from the first crop: causal, so the same as the whole pass
    np.testing.assert_array_equal(cut[:15], full[:15])
    # rows 15..29: the second crop (tokens 15..30) alone, as a document of its own
    alone = position_gap.torch_head_argmax(head, W, vocab, toks[15:31], hid[15:31])
    np.testing.assert_array_equal(cut[15:30], alone)
    # and the reset changes something: the later rows attend to fewer rows than the whole pass's
    assert (cut[15:] != full[15:]).any()


def test_tally_bins_positions():
    t = position_gap.Tally(width=4, n_pos=10)
    t.add(("s", "h", "m"), np.array([1, 0, 1, 1, 0, 1]), np.array([0, 1, 4, 5, 8, 9]))
    f = t.figures()["s"]["h"]["m"]
    assert f["all"] == round(4 / 6, 4) and f["positions"] == 6
    assert f["by_position"] == {"0-3": [0.5, 2], "4-7": [1.0, 2], "8-11": [0.5, 2]}
    assert "| s | h | m | 0.667 (6) | 0.500 | 1.000 | 0.500 |" in position_gap.table(t.figures())
