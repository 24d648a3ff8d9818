"""The NextN head run recursively, as drafting runs it, and the soft distillation loss.

How pymtp drafts (``pymtp_draft_greedy`` in the shim, llama.cpp's glm4moe ``graph_mtp``):
the draft context's KV holds, at position q, the head's input (x(q+1), h(q)) for every
accepted position q <= p, h the trunk's row *after* ``output_norm``. Step 1 reads row p and
predicts x(p+2). Step k >= 2 decodes one row at position p+k-1 with the token drafted by step
k-1 and that step's own hidden row, the ``h_nextn`` tensor of graph_mtp, which is the
block's output *after* ``shared_head_norm`` (post-norm, as the trunk's row is); it attends
to the accepted rows 0..p and to the chain's own earlier rows p+1..p+k-2.

Training runs every origin p of a crop at once (FastMTP's recursion with one shared head):
step 1 is the ordinary causal pass; step k's row at origin p attends to step 1's keys at
positions <= p plus the keys steps 2..k made at that same origin (a causal score matrix and
k-1 extra diagonal columns). Step k's input token is, by default, the text's own x(p+k)
(``feed="text"``): on the trunk's greedy text that is exactly the drafted token whenever
steps 1..k-1 were accepted, the only case in which step k's draft can be accepted;
``feed="draft"`` feeds the head's own argmax instead, as inference does on rejected chains.

Loss: KL(trunk || head) at each step, the trunk's distribution being its stored top-k at
position p+k renormalised over the draft vocabulary, the head's a softmax over that same
vocabulary (``pymtp.draft_vocab``: the tokens drafting scores); steps weighted 0.6^(k-1).
Optionally (``hard_weight`` > 0) plus a cross-entropy term on the trunk's top-1: greedy
acceptance at draft length 1 is the head's argmax agreeing with the trunk's, which the soft
KL weighs no more than its share of the trunk's mass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .head import NextNHead
from .model import rope_neox

STEP_DECAY = 0.6


def _rope_at(head: NextNHead, T: int, offset: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = head.rope(T, offset)
    return cos.to(device), sin.to(device)


def _qkv(head: NextNHead, x: torch.Tensor, cos, sin):
    a = head.attn
    B, T, _ = x.shape
    y = head.attn_norm(x)
    q = a.wq(y).view(B, T, a.n_head, -1).transpose(1, 2)
    k = a.wk(y).view(B, T, a.n_head_kv, -1).transpose(1, 2)
    v = a.wv(y).view(B, T, a.n_head_kv, -1).transpose(1, 2)
    rep = a.n_head // a.n_head_kv
    return rope_neox(q, cos, sin), rope_neox(k, cos, sin).repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)


def _finish(head: NextNHead, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
    """The block after attention: residual, MoE + shared expert, shared_head_norm."""
    B, H, T, D = att.shape
    x = x + head.attn.wo(att.transpose(1, 2).reshape(B, T, H * D))
    x = x + head.ffn(head.attn_post_norm(x))
    return head.shared_head_norm(x)


def _in_proj(head: NextNHead, emb: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    return head.eh_proj(torch.cat([head.enorm(emb), head.hnorm(h)], dim=-1))


def _visible(T: int, seg: torch.Tensor | None, device) -> torch.Tensor:
    """Which keys each query sees: causal (T, T), and within its own document when seg
    (B, >= T) gives each position's document: (B, 1, T, T)."""
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    if seg is None:
        return causal
    s = seg[:, :T]
    return (causal & (s[:, :, None] == s[:, None, :]))[:, None]


def _chain_attention(q, K1, V1, chain_k: list, chain_v: list, visible: torch.Tensor) -> torch.Tensor:
    """q (B,H,T,D) at origin p attends to K1[..., :p+1, :] (where visible) and to chain_k[m][..., p, :]."""
    T, D = q.shape[2], q.shape[3]
    scale = D**-0.5
    main = (q @ K1.transpose(-1, -2)) * scale
    main = main.masked_fill(~visible, float("-inf"))
    extra = [((q * k).sum(-1, keepdim=True)) * scale for k in chain_k]
    w = torch.softmax(torch.cat([main] + extra, dim=-1), dim=-1)
    out = w[..., :T] @ V1
    for i, v in enumerate(chain_v):
        out = out + w[..., T + i : T + i + 1] * v
    return out


def chain_forward(
    head: NextNHead,
    W: torch.Tensor,
    tokens: torch.Tensor,
    hidden: torch.Tensor,
    n_steps: int,
    *,
    feed: str = "text",
    vocab_ids: torch.Tensor | None = None,
    seg: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """The head's output rows for steps 1..n_steps at every origin p of a crop.

    tokens (B, L) and hidden (B, L, E): a crop of a document, hidden[:, q] = h(q). Returns
    n_steps tensors (B, L-1, E); row p of step k predicts x(p+k+1) (valid for p+k < L).
    feed="draft" needs vocab_ids (the draft vocabulary the argmax is taken over). seg (B, L):
    each position's document in a packed row; attention stays inside it (the loss masks
    the rows whose targets lie in the next document)."""
    if feed not in ("text", "draft"):
        raise ValueError(f"feed must be 'text' or 'draft', got {feed!r}")
    B, L = tokens.shape
    T = L - 1
    dev = hidden.device
    cos, sin = _rope_at(head, T, 0, dev)
    x1 = _in_proj(head, F.embedding(tokens[:, 1:], W), hidden[:, :T])
    q, K1, V1 = _qkv(head, x1, cos, sin)
    visible = _visible(T, seg, dev)
    if seg is None:
        att = F.scaled_dot_product_attention(q, K1, V1, is_causal=True)
    else:
        att = F.scaled_dot_product_attention(q, K1, V1, attn_mask=visible)
    g = _finish(head, x1, att)
    outs = [g]
    chain_k, chain_v = [], []
    for k in range(2, n_steps + 1):
        if feed == "text":
            tok = F.pad(tokens[:, k:], (0, k - 1))  # x(p+k); past the crop: masked by the loss
        else:
            assert vocab_ids is not None, 'feed="draft" needs vocab_ids'
            Wsub = W[vocab_ids]
            tok = vocab_ids[(g.detach() @ Wsub.T).argmax(-1)]
        xk = _in_proj(head, F.embedding(tok, W), g)
        cos, sin = _rope_at(head, T, k - 1, dev)
        qk, kk, vk = _qkv(head, xk, cos, sin)
        chain_k.append(kk)
        chain_v.append(vk)
        g = _finish(head, xk, _chain_attention(qk, K1, V1, chain_k, chain_v, visible))
        outs.append(g)
    return outs


class DraftVocab:
    """The draft vocabulary's ids and a full-id -> column map (-1: not in it)."""

    def __init__(self, ids, n_vocab: int, device="cpu"):
        self.ids = torch.as_tensor(ids, dtype=torch.long, device=device).unique()
        self.col = torch.full((n_vocab,), -1, dtype=torch.long, device=device)
        self.col[self.ids] = torch.arange(len(self.ids), device=device)


def teacher_targets(vocab: DraftVocab, topk_ids: torch.Tensor, topk_logp: torch.Tensor, temperature: float = 1.0):
    """(columns, probabilities renormalised over the draft vocabulary, row valid) of the
    trunk's stored top-k; a row with no top-k token in the vocabulary is not valid.
    temperature < 1 sharpens the target toward the trunk's argmax (greedy acceptance is an
    argmax match); 1 keeps the trunk's distribution."""
    if not temperature > 0:
        raise ValueError(f"the target temperature must be > 0, got {temperature}")
    col = vocab.col[topk_ids.long()]
    inside = col >= 0
    lp = topk_logp.float() / temperature
    # relative to the top-1 (no underflow when sharpened); padded rows (all -inf) stay 0, not NaN
    p = (lp - lp[..., :1].clamp_min(-1e4)).exp() * inside
    mass = p.sum(-1, keepdim=True)
    return col.clamp_min(0), p / mass.clamp_min(1e-12), mass.squeeze(-1) > 0


def step_loss(
    g: torch.Tensor, Wsub: torch.Tensor, col: torch.Tensor, p: torch.Tensor, valid: torch.Tensor, top1_col: torch.Tensor
):
    """(mean KL over valid rows, agreement rows, mean cross-entropy to the teacher's top-1)
    of one step: g (N, E) head rows, the teacher's columns / probabilities (N, k), its top-1
    column (-1 outside the vocabulary; such rows have no top-1 term)."""
    logq = torch.log_softmax(g @ Wsub.T, dim=-1)
    lq = logq.gather(-1, col)
    kl = (p * (torch.log(p.clamp_min(1e-12)) - lq)).sum(-1)
    n = valid.sum().clamp_min(1)
    agree = logq.detach().argmax(-1) == top1_col
    # greedy acceptance is an argmax match: -log q(trunk's argmax), beside the soft KL
    has_top1 = valid & (top1_col >= 0)
    ce = -logq.gather(-1, top1_col.clamp_min(0)[:, None]).squeeze(-1)
    ce = (ce * has_top1).sum() / has_top1.sum().clamp_min(1)
    return (kl * valid).sum() / n, agree, ce


def chain_loss(
    head: NextNHead,
    W: torch.Tensor,
    vocab: DraftVocab,
    tokens,
    hidden,
    topk_ids,
    topk_logp,
    mask,
    n_steps: int,
    *,
    feed: str = "text",
    decay: float = STEP_DECAY,
    target_temperature: float = 1.0,
    seg: torch.Tensor | None = None,
    hard_weight: float = 0.0,
):
    """The weighted loss over steps and, per step, (KL, agreement, chain agreement, rows, CE):
    agreement is the head's argmax equal to the trunk's top-1 at that step; chain agreement,
    at steps 1..k all (what P(first k accepted) is, teacher-forced). seg: packed rows'
    documents (chain_forward); a step's target in another document than its origin is masked.
    hard_weight: each step's loss is KL + hard_weight x the cross-entropy to the trunk's
    top-1 (0: the soft KL alone)."""
    if not hard_weight >= 0:
        raise ValueError(f"the hard-target weight must be >= 0, got {hard_weight}")
    Wsub = W[vocab.ids]
    outs = chain_forward(head, W, tokens, hidden, n_steps, feed=feed, vocab_ids=vocab.ids, seg=seg)
    T = tokens.shape[1] - 1
    total, wsum, figures = 0.0, 0.0, []
    chain = torch.ones_like(mask[:, :T])
    for k, g in enumerate(outs, start=1):
        # step k at origin p: the trunk's distribution at p+k
        ids = F.pad(topk_ids[:, k:].long(), (0, 0, 0, k - 1))
        logp = F.pad(topk_logp[:, k:].float(), (0, 0, 0, k - 1), value=float("-inf"))
        ok = F.pad(mask[:, k:], (0, k - 1), value=False)
        if seg is not None:
            ok = ok & F.pad(seg[:, k:] == seg[:, :-k], (0, k - 1), value=False)
        col, p, valid = teacher_targets(vocab, ids, logp, target_temperature)
        top1 = vocab.col[ids[..., 0]]
        valid = valid & ok
        kl, agree, ce = step_loss(
            g.reshape(-1, g.shape[-1]),
            Wsub,
            col.reshape(-1, col.shape[-1]),
            p.reshape(-1, p.shape[-1]),
            valid.reshape(-1),
            top1.reshape(-1),
        )
        agree = agree.reshape(valid.shape) & valid
        chain = chain & agree
        w = decay ** (k - 1)
        total = total + w * (kl + hard_weight * ce if hard_weight else kl)
        wsum += w
        n = valid.sum()
        figures.append(
            {
                "kl": float(kl.detach()),
                "ce": float(ce.detach()),
                "agree": float(agree.sum() / n.clamp_min(1)),
                "chain": float(chain.sum() / n.clamp_min(1)),
                "rows": int(n),
            }
        )
    return total / wsum, figures
