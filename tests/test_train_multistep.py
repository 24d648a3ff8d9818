"""pymtp.train.multistep: the torch recursion is the one pymtp drafts with.

The head's step k >= 2 is fed its own output row, the glm4moe graph_mtp's ``h_nextn`` (after
``shared_head_norm``), and the token drafted by step k-1; its row attends to the accepted rows
and the chain's earlier rows. Checked against llama.cpp through pymtp on the default model:
the draft context fed the accepted rows, then each drafted token with the draft context's own
hidden row (what ``pymtp_draft_greedy`` does in C). Tolerance as tests/test_smollm2.py's
head test (hidden rows within ``HIDDEN_ATOL``; measured at most 0.010 over 3 steps at three
origins on an AVX-512 EPYC, rows up to ~30).
The pre-norm row (before shared_head_norm) fed back instead misses by 3.5-5.5, so the test
tells the two apart. Also: the loss's pieces on small hand-made inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pymtp  # noqa: E402
from pymtp.train import multistep  # noqa: E402
from pymtp.train.head import HeadConfig, NextNHead, read_head_gguf  # noqa: E402

HIDDEN_ATOL = 0.05
N_STEPS = 3


@pytest.fixture(scope="module")
def default():
    m = pymtp.load(n_ctx=1024)
    yield m
    m.close()


def _tokens(model, n):
    from pymtp.train import data

    _, held = data.split_files()
    text = "".join(t for t in (data.read_text(f) for f in held[:3]) if t)
    return model.tokenize(text, add_special=False)[:n]


def _llama_chain(default, toks, origin):
    """llama.cpp's drafted tokens and hidden rows for steps 1..N_STEPS from origin p."""
    with pymtp.TargetContext(default, n_ctx=512) as t:
        t.decode(toks[: origin + 2], 0)
        h = t.hidden().copy()
        with pymtp.DraftContext(t) as d:
            d.decode(toks[1 : origin + 2], 0, h[0], h[1 : origin + 1])  # rows 0..p: (x(q+1), h(q))
            drafted, rows = [], []
            for k in range(1, N_STEPS + 1):
                g = d.hidden()[-1].copy()
                tok = int(d.logits()[-1].argmax())
                drafted.append(tok)
                rows.append(g)
                if k < N_STEPS:
                    d.decode([tok], origin + k, g)
    return drafted, np.stack(rows), h


def _torch_chain(head, W, toks, h, origin, drafted, prenorm=False):
    """The torch recursion at origin p, fed llama.cpp's drafted tokens (feed='text' on a crop
    whose tokens after x(p+1) are the drafts)."""
    crop = list(toks[: origin + 2]) + drafted[: N_STEPS - 1]
    hid = np.zeros((len(crop), h.shape[1]), np.float32)
    hid[: origin + 1] = h[: origin + 1]
    tk = torch.tensor([crop])
    hh = torch.from_numpy(hid[None])
    if prenorm:  # the wrong hand-off: the block output before shared_head_norm
        norm = head.shared_head_norm
        head.shared_head_norm = torch.nn.Identity()
        try:
            pre = multistep.chain_forward(head, W, tk, hh, N_STEPS)
        finally:
            head.shared_head_norm = norm
        outs = [norm(pre[0])] + [norm(o) for o in pre[1:]]
        # step 1 unchanged; steps >= 2 fed the pre-norm row
        return np.stack([o[0, origin].numpy() for o in outs])
    outs = multistep.chain_forward(head, W, tk, hh, N_STEPS)
    return np.stack([o[0, origin].numpy() for o in outs])


def test_recursion_matches_llama_cpp_drafting(default):
    from pymtp import default_model
    from pymtp.train.head import gguf_weights

    toks = _tokens(default, 200)
    head = read_head_gguf(default_model.HEAD, HeadConfig())
    W = torch.from_numpy(gguf_weights(default.path, {"token_embd.weight"})["token_embd.weight"])
    for origin in (40, 120, 190):
        drafted, want, h = _llama_chain(default, toks, origin)
        with torch.no_grad():
            got = _torch_chain(head, W, toks, h, origin, drafted)
            wrong = _torch_chain(head, W, toks, h, origin, drafted, prenorm=True)
            tok = (torch.from_numpy(got) @ W.T).argmax(-1).tolist()
        err = np.abs(got - want).max(axis=1)
        assert err.max() <= HIDDEN_ATOL, err
        assert np.abs(wrong[1:] - want[1:]).max() > 10 * HIDDEN_ATOL
        assert tok == drafted


def test_teacher_targets_renormalise_over_the_draft_vocabulary():
    vocab = multistep.DraftVocab([2, 5, 7], n_vocab=10)
    ids = torch.tensor([[5, 3, 7], [1, 3, 4]])
    logp = torch.log(torch.tensor([[0.5, 0.3, 0.1], [0.6, 0.2, 0.1]]))
    col, p, valid = multistep.teacher_targets(vocab, ids, logp)
    assert col[0].tolist() == [1, 0, 2]
    assert torch.allclose(p[0], torch.tensor([0.5 / 0.6, 0.0, 0.1 / 0.6]))
    assert valid.tolist() == [True, False]


def test_a_target_temperature_sharpens_and_padding_stays_zero():
    vocab = multistep.DraftVocab([2, 5, 7], n_vocab=10)
    ids = torch.tensor([[5, 3, 7], [1, 3, 4], [5, 7, 2]])
    inf = float("inf")
    logp = torch.log(torch.tensor([[0.5, 0.3, 0.1], [0.6, 0.2, 0.1], [1.0, 1.0, 1.0]]))
    logp[2] = -inf  # a padded row (past the crop)
    _, p, valid = multistep.teacher_targets(vocab, ids, logp, 0.5)
    # p ** 2 renormalised over the in-vocabulary tokens 5 and 7
    assert torch.allclose(p[0], torch.tensor([0.25 / 0.26, 0.0, 0.01 / 0.26]))
    assert valid.tolist() == [True, False, False] and not p.isnan().any()
    assert float(p[2].abs().sum()) == 0.0
    assert torch.allclose(multistep.teacher_targets(vocab, ids, logp, 1.0)[1][0], torch.tensor([0.5, 0.0, 0.1]) / 0.6)
    with pytest.raises(ValueError, match="temperature"):
        multistep.teacher_targets(vocab, ids, logp, 0.0)


def test_loss_is_zero_only_when_the_head_matches_the_teacher():
    torch.manual_seed(0)
    Wsub = torch.randn(6, 4)
    g = torch.randn(3, 4)
    q = torch.softmax(g @ Wsub.T, -1)
    top = q.topk(6, -1)
    col, p = top.indices, top.values
    kl, agree, _ = multistep.step_loss(g, Wsub, col, p, torch.ones(3, dtype=torch.bool), col[:, 0])
    assert abs(float(kl)) < 1e-5 and agree.all()
    kl2, _, _ = multistep.step_loss(g.flip(0), Wsub, col, p, torch.ones(3, dtype=torch.bool), col[:, 0])
    assert float(kl2) > 0.01


def _chain_case():
    """A small random head and a 2 x 12 batch of teacher targets (top-4) for chain_loss."""
    torch.manual_seed(0)
    cfg = HeadConfig(n_vocab=50, n_embd=32, n_head=4, n_head_kv=2, n_ff_exp=16, n_expert_shared=1)
    head = NextNHead(cfg)
    W = torch.randn(50, 32)
    vocab = multistep.DraftVocab(torch.arange(0, 50, 2), 50)
    B, L, K = 2, 12, 4
    toks = torch.randint(0, 50, (B, L))
    hid = torch.randn(B, L, 32)
    ids = torch.randint(0, 50, (B, L, K))
    logp = torch.log_softmax(torch.randn(B, L, K), -1)
    mask = torch.ones(B, L, dtype=torch.bool)
    return head, W, vocab, toks, hid, ids, logp, mask


def test_chain_loss_weights_steps_and_masks_the_crop_end():
    head, W, vocab, toks, hid, ids, logp, mask = _chain_case()
    B, L = toks.shape
    loss, figs = multistep.chain_loss(head, W, vocab, toks, hid, ids, logp, mask, 3)
    assert [f["rows"] <= B * (L - k) for k, f in enumerate(figs, 1)] == [True] * 3
    assert figs[0]["rows"] > figs[2]["rows"]
    w = np.array([1, 0.6, 0.36])
    assert abs(float(loss.detach()) - float((w * [f["kl"] for f in figs]).sum() / w.sum())) < 1e-5
    loss.backward()
    assert head.eh_proj.weight.grad is not None and head.eh_proj.weight.grad.abs().sum() > 0
    # feed="draft" runs the head's own argmax in
    loss_d, _ = multistep.chain_loss(head, W, vocab, toks, hid, ids, logp, mask, 3, feed="draft")
    assert torch.isfinite(loss_d)


def test_the_top1_term_is_the_cross_entropy_and_pushes_toward_the_argmax():
    """Identity output matrix: g is the logits. The hard term is -log q(top-1) over rows whose
    top-1 is in the vocabulary; its gradient raises the top-1 logit and lowers the others more
    than the KL alone does."""
    Wsub = torch.eye(5)
    g = torch.tensor(
        [[2.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 3.0], [1.0, 0.0, 0.0, 0.0, 0.0]], requires_grad=True
    )
    col = torch.tensor([[1, 0, 2], [4, 3, 0], [0, 1, 2]])
    p = torch.tensor([[0.4, 0.35, 0.25], [0.5, 0.3, 0.2], [0.6, 0.3, 0.1]])
    valid = torch.tensor([True, True, False])  # the third row is masked
    top1 = torch.tensor([1, -1, 0])  # the second row's top-1 lies outside the vocabulary
    kl, agree, ce = multistep.step_loss(g, Wsub, col, p, valid, top1)
    assert agree.tolist() == [False, False, True]
    # only the first row has a top-1 term
    assert torch.allclose(ce, -torch.log_softmax(g[0], -1)[1])
    (gk,) = torch.autograd.grad(kl, g, retain_graph=True)
    (gh,) = torch.autograd.grad(kl + 2.0 * ce, g)
    assert gh[0, 1] < gk[0, 1] < 0  # the trunk's argmax is pushed up harder
    assert (gh[0, [0, 2, 3, 4]] > gk[0, [0, 2, 3, 4]]).all()  # every other logit down harder
    assert torch.equal(gh[1:], gk[1:])  # rows without a top-1 term: the KL's gradient alone
    # a few steps on the combined loss turn the head's argmax to the trunk's; the KL alone,
    # at the same rate and steps, does not get there (its target is 0.4 against 0.35)
    for w, turned in ((0.0, False), (2.0, True)):
        z = g.detach()[:1].clone().requires_grad_(True)
        for _ in range(3):
            k, _, c = multistep.step_loss(z, Wsub, col[:1], p[:1], valid[:1], top1[:1])
            (d,) = torch.autograd.grad(k + w * c, z)
            z = (z - 0.5 * d).detach().requires_grad_(True)
        assert (int(z.argmax()) == 1) == turned


def test_chain_loss_adds_the_weighted_top1_term():
    head, W, vocab, toks, hid, ids, logp, mask = _chain_case()
    soft, figs = multistep.chain_loss(head, W, vocab, toks, hid, ids, logp, mask, 3)
    hard, figs_h = multistep.chain_loss(head, W, vocab, toks, hid, ids, logp, mask, 3, hard_weight=0.5)
    w = np.array([1, 0.6, 0.36])
    kl, ce = np.array([f["kl"] for f in figs]), np.array([f["ce"] for f in figs])
    assert (ce > 0).all() and float(hard.detach()) > float(soft.detach())
    assert abs(float(hard.detach()) - float((w * (kl + 0.5 * ce)).sum() / w.sum())) < 1e-5
    assert [f["agree"] for f in figs] == [f["agree"] for f in figs_h]
    with pytest.raises(ValueError, match="hard-target weight"):
        multistep.chain_loss(head, W, vocab, toks, hid, ids, logp, mask, 3, hard_weight=-1.0)
