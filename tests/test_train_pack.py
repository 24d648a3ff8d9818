"""Cheaper training steps, same results: the routed experts computed on their own rows only
(equal to the dense reference, values and gradients), and documents packed into one row
(each document's outputs and losses as if it had the row to itself). torch only."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pymtp.train import multistep, teacher  # noqa: E402
from pymtp.train.crops import Crops  # noqa: E402
from pymtp.train.head import HeadConfig, NextNHead  # noqa: E402

CFG = HeadConfig(n_vocab=50, n_embd=32, n_head=4, n_head_kv=2, n_ff_exp=16, n_expert_shared=1)


def _head(seed=0):
    torch.manual_seed(seed)
    head = NextNHead(CFG)
    with torch.no_grad():  # routing that is not a tie, experts that differ
        head.ffn.gate_inp.weight.normal_(0, 1.0)
        head.ffn.exp_probs_b.normal_(0, 0.3)
    return head


def test_sparse_experts_equal_the_dense_reference():
    head = _head()
    x = torch.randn(3, 11, CFG.n_embd, requires_grad=True)
    outs, grads = [], []
    for sparse in (False, True):
        head.ffn.sparse = sparse
        head.zero_grad()
        x.grad = None
        y = head.ffn(x)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        outs.append(y.detach())
        grads.append([x.grad.clone()] + [p.grad.clone() for p in (head.ffn.gate_exps, head.ffn.down_exps)])
    # every expert got rows (else the check would skip a path)
    _, sel = head.ffn.routing(x.detach())
    assert set(sel.unique().tolist()) == set(range(CFG.n_expert))
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)
    for a, b in zip(grads[1], grads[0]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _teacher(B, L, K, seed=0):
    g = torch.Generator().manual_seed(seed)
    toks = torch.randint(0, 50, (B, L), generator=g)
    hid = torch.randn(B, L, CFG.n_embd, generator=g)
    ids = torch.randint(0, 50, (B, L, K), generator=g)
    logp = torch.log_softmax(torch.randn(B, L, K, generator=g), -1)
    return toks, hid, ids, logp


def test_a_packed_row_computes_each_document_as_if_alone():
    head = _head(1).eval()
    W = torch.randn(50, CFG.n_embd)
    vocab = multistep.DraftVocab(torch.arange(0, 50, 2), 50)
    La, Lb, K = 9, 7, 4
    toks, hid, ids, logp = _teacher(1, La + Lb, K)
    seg = torch.tensor([[0] * La + [1] * Lb])
    packed = multistep.chain_forward(head, W, toks, hid, 3, seg=seg)
    a = multistep.chain_forward(head, W, toks[:, :La], hid[:, :La], 3)
    b = multistep.chain_forward(head, W, toks[:, La:], hid[:, La:], 3)
    for k in range(1, 4):
        # step k at origin p is valid when p+k lies in p's document
        torch.testing.assert_close(packed[k - 1][:, : La - k], a[k - 1][:, : La - k], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(packed[k - 1][:, La : La + Lb - k], b[k - 1][:, : Lb - k], atol=1e-4, rtol=1e-4)
    # without seg the second document would see the first: its rows differ
    unpacked = multistep.chain_forward(head, W, toks, hid, 3)
    assert (unpacked[0][:, La : La + Lb - 1] - b[0][:, : Lb - 1]).abs().max() > 1e-3

    # the loss counts exactly the rows of the two documents alone, with the same KL sum
    mask = torch.ones(1, La + Lb, dtype=torch.bool)
    _, fp = multistep.chain_loss(head, W, vocab, toks, hid, ids, logp, mask, 3, seg=seg)
    _, fa = multistep.chain_loss(head, W, vocab, toks[:, :La], hid[:, :La], ids[:, :La], logp[:, :La], mask[:, :La], 3)
    _, fb = multistep.chain_loss(head, W, vocab, toks[:, La:], hid[:, La:], ids[:, La:], logp[:, La:], mask[:, La:], 3)
    for p, x, y in zip(fp, fa, fb):
        assert p["rows"] == x["rows"] + y["rows"]
        assert abs(p["kl"] * p["rows"] - (x["kl"] * x["rows"] + y["kl"] * y["rows"])) < 1e-3


def _docs(lens, K=4, E=CFG.n_embd):
    rng = np.random.default_rng(0)
    n = sum(lens)
    return teacher.Documents(
        tokens=np.arange(n, dtype=np.int32) % 50,
        hidden=rng.normal(size=(n, E)).astype(np.float16),
        topk_ids=rng.integers(0, 50, (n, K)).astype(np.uint16),
        topk_logp=np.full((n, K), -1.0, np.float16),
        offsets=np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
        first=np.ones(len(lens), np.int64),
        domain=np.asarray(["code"] * len(lens)),
    )


def test_packed_crops_fill_rows_with_whole_document_pieces():
    lens = [40, 25, 60, 100, 12]
    docs = _docs(lens)
    crops = Crops(docs, 64)
    rng = np.random.default_rng(0)
    toks, hid, ids, logp, mask, seg = crops.packed(rng, 6, "cpu")
    assert float(mask.float().mean()) > 0.9
    assert ((seg >= 0) == mask).all()
    for b in range(6):
        for s in seg[b].unique().tolist():
            if s < 0:
                continue
            pos = (seg[b] == s).nonzero().squeeze(-1)
            assert (pos.diff() == 1).all()  # a piece is contiguous
            t = toks[b, pos].numpy()
            # ... and a contiguous run of one document's tokens (tokens here are global offsets mod 50)
            assert ((np.diff(t) % 50) == 1).all()
    # padded crops leave the short documents' rows partly empty
    assert crops.padding(np.random.default_rng(1), 8, packed=False) > crops.padding(
        np.random.default_rng(1), 8, packed=True
    )


def test_domain_weights_set_how_often_each_domain_is_drawn():
    docs = _docs([40, 40, 40, 40])
    docs.domain = np.asarray(["code", "chat", "chat", "chat"])
    rng = np.random.default_rng(0)
    # unweighted: a quarter of the draws are the code document
    assert abs(np.mean(Crops(docs, 32)._pick(rng, 4000) == 0) - 0.25) < 0.03
    # code weighted 3: half of them
    assert abs(np.mean(Crops(docs, 32, {"code": 3.0})._pick(rng, 4000) == 0) - 0.5) < 0.03
    # weight 0: never drawn, in padded and packed batches alike
    crops = Crops(docs, 32, {"chat": 0.0})
    toks = crops.packed(rng, 4, "cpu")[0]
    assert ((toks < 40) | (toks == 0)).all()  # tokens are global offsets mod 50: doc 0 is 0..39
    with pytest.raises(ValueError, match="not in the data"):
        Crops(docs, 32, {"prose": 2.0})
    with pytest.raises(ValueError, match=">= 0"):
        Crops(docs, 32, {"code": 0.0, "chat": 0.0})


def test_domain_weight_arguments_parse_or_say_why_not():
    from pymtp.train.selfdistill import parse_weights

    assert parse_weights(["code=2", " docs = 0.5"]) == {"code": 2.0, "docs": 0.5}
    assert parse_weights(None) == {}
    for bad in ("code", "code=x", "=2"):
        with pytest.raises(ValueError, match="DOMAIN=NUMBER"):
            parse_weights([bad])
