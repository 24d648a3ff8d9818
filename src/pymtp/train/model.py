"""PyTorch GLM-4-MoE trunk + one NextN (MTP) block, matching llama.cpp's glm4moe graphs.

Mirrors llama.cpp 0c1e57098bba, src/models/glm4-moe.cpp:

trunk block (all trunk blocks dense, ``leading_dense_block_count = n_layer``)::

    h   = x + wo(attn(rope_neox(wq(rms(x)*attn_norm)), rope_neox(wk(..)), wv(..)))   # no biases, no q/k norm
    out = h + down(silu(gate(rms(h)*attn_post_norm)) * up(..))

    hidden = rms(out_L) * output_norm          # "h_nextn": the row handed to the MTP head
    logits = output(hidden)                    # output = tok_embd when tied

MTP block (graph_mtp), at position p (token x(p+1), hidden row h(p))::

    cur  = eh_proj(concat(rms(embd(x(p+1)))*enorm, rms(h(p))*hnorm))   # e first, then h
    h    = cur + attn(rms(cur)*attn_norm)                                # own KV, rope position p
    y    = rms(h)*attn_post_norm
    out  = h + moe(y) + shared_expert(y)
    mtp_hidden = rms(out)*shared_head_norm    # "h_nextn" of the MTP graph (recursive drafting)
    mtp_logits = output(mtp_hidden)           # predicts x(p+2)

MoE (build_moe_ffn, sigmoid gating): probs = sigmoid(gate_inp(y)); experts = top-k of
(probs + exp_probs_b) (the bias only selects); weights = probs[experts], normalised to sum 1
(expert_weights_norm, sum clamped at 6.1e-5), times expert_weights_scale.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_vocab: int = 4096
    n_embd: int = 256
    n_layer: int = 4  # trunk blocks (all dense)
    n_head: int = 4
    n_ff: int = 768  # dense FFN width
    n_expert: int = 4  # routed experts in the MTP block
    n_expert_used: int = 2
    n_ff_exp: int = 256  # width of each routed expert (and of the shared expert)
    n_expert_shared: int = 1
    n_ctx: int = 512
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    expert_weights_norm: bool = True
    expert_weights_scale: float = 1.0

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, T, D); NEOX layout: rotate the two halves of each head."""
    d2 = x.shape[-1] // 2
    x1, x2 = x[..., :d2], x[..., d2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        e = cfg.n_embd
        self.n_head = cfg.n_head
        self.wq = nn.Linear(e, e, bias=False)
        self.wk = nn.Linear(e, e, bias=False)
        self.wv = nn.Linear(e, e, bias=False)
        self.wo = nn.Linear(e, e, bias=False)

    def forward(self, x, cos, sin):
        B, T, E = x.shape
        H = self.n_head
        q = self.wq(x).view(B, T, H, -1).transpose(1, 2)
        k = self.wk(x).view(B, T, H, -1).transpose(1, 2)
        v = self.wv(x).view(B, T, H, -1).transpose(1, 2)
        q, k = rope_neox(q, cos, sin), rope_neox(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, E))


class MLP(nn.Module):
    def __init__(self, n_embd: int, n_ff: int):
        super().__init__()
        self.gate = nn.Linear(n_embd, n_ff, bias=False)
        self.up = nn.Linear(n_embd, n_ff, bias=False)
        self.down = nn.Linear(n_ff, n_embd, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    """Routed experts (sigmoid gating, selection bias) + shared expert(s).

    ``sparse``: each expert runs on the rows routed to it only (n_expert_used of n_expert:
    half the routed FLOPs in the head); otherwise every expert runs on every row, weighted
    by the routing weights (0 where unselected), the reference the sparse form must match."""

    sparse = True

    def __init__(self, cfg: Config):
        super().__init__()
        E, e, f = cfg.n_expert, cfg.n_embd, cfg.n_ff_exp
        self.cfg = cfg
        self.gate_inp = nn.Linear(e, E, bias=False)
        # exp_probs_b: not trained by gradient; adjusted for load balance (aux-loss-free, DeepSeek-V3)
        self.register_buffer("exp_probs_b", torch.zeros(E))
        s = 1.0 / math.sqrt(e)
        self.gate_exps = nn.Parameter(torch.empty(E, f, e).uniform_(-s, s))
        self.up_exps = nn.Parameter(torch.empty(E, f, e).uniform_(-s, s))
        self.down_exps = nn.Parameter(torch.empty(E, e, f).uniform_(-1 / math.sqrt(f), 1 / math.sqrt(f)))
        self.shared = MLP(e, f * cfg.n_expert_shared) if cfg.n_expert_shared > 0 else None
        self.last_load = None

    def routing(self, x):
        probs = torch.sigmoid(self.gate_inp(x))  # (..., E)
        sel = torch.topk(probs + self.exp_probs_b, self.cfg.n_expert_used, dim=-1).indices
        w = probs.gather(-1, sel)
        if self.cfg.expert_weights_norm:
            w = w / w.sum(-1, keepdim=True).clamp_min(6.103515625e-5)
        if self.cfg.expert_weights_scale not in (0.0, 1.0):
            w = w * self.cfg.expert_weights_scale
        # under CUDA autocast the sum above is float32 while probs is bfloat16
        dense_w = torch.zeros_like(probs).scatter(-1, sel, w.to(probs.dtype))  # (..., E), 0 where unselected
        return dense_w, sel

    def forward(self, x):
        dense_w, sel = self.routing(x)
        if self.training:
            self.last_load = F.one_hot(sel, self.cfg.n_expert).sum(dim=tuple(range(sel.dim()))).float().detach()
        out = self._routed_sparse(x, dense_w, sel) if self.sparse else self._routed_dense(x, dense_w)
        if self.shared is not None:
            out = out + self.shared(x)
        return out

    def _routed_dense(self, x, dense_w):
        g = torch.einsum("...e,xfe->...xf", x, self.gate_exps)
        u = torch.einsum("...e,xfe->...xf", x, self.up_exps)
        h = F.silu(g) * u * dense_w.unsqueeze(-1)
        return torch.einsum("...xf,xef->...e", h, self.down_exps)

    def _routed_sparse(self, x, dense_w, sel):
        shape = x.shape
        xf = x.reshape(-1, shape[-1])
        wf = dense_w.reshape(-1, dense_w.shape[-1])
        sel_f = sel.reshape(-1, sel.shape[-1])
        out = None
        for e in range(self.cfg.n_expert):
            rows = (sel_f == e).any(-1).nonzero().squeeze(-1)
            if rows.numel() == 0:
                continue
            xe = xf.index_select(0, rows)
            h = F.silu(F.linear(xe, self.gate_exps[e])) * F.linear(xe, self.up_exps[e])
            y = F.linear(h * wf.index_select(0, rows)[:, e : e + 1].to(h.dtype), self.down_exps[e])
            if out is None:
                out = torch.zeros(xf.shape[0], shape[-1], dtype=y.dtype, device=x.device)
            out = out.index_add(0, rows, y)
        if out is None:  # no rows
            out = torch.zeros(xf.shape[0], shape[-1], dtype=x.dtype, device=x.device)
        return out.reshape(shape)


class Block(nn.Module):
    def __init__(self, cfg: Config, moe: bool):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.attn_post_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.ffn = MoE(cfg) if moe else MLP(cfg.n_embd, cfg.n_ff)

    def forward(self, x, cos, sin):
        h = x + self.attn(self.attn_norm(x), cos, sin)
        return h + self.ffn(self.attn_post_norm(h))


class MTPBlock(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.enorm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.hnorm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.eh_proj = nn.Linear(2 * cfg.n_embd, cfg.n_embd, bias=False)
        self.block = Block(cfg, moe=True)
        self.shared_head_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)

    def forward(self, emb, h, cos, sin):
        x = self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(h)], dim=-1))
        return self.shared_head_norm(self.block(x, cos, sin))


class GLM4MoEMTP(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.tok_embd = nn.Embedding(cfg.n_vocab, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg, moe=False) for _ in range(cfg.n_layer))
        self.output_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.output = None if cfg.tie_embeddings else nn.Linear(cfg.n_embd, cfg.n_vocab, bias=False)
        self.mtp = MTPBlock(cfg)
        self._init()

    def _init(self):
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=std)
                if name.endswith("wo.weight") or name.endswith("down.weight"):
                    p.data.mul_(1 / math.sqrt(2 * (self.cfg.n_layer + 1)))
        for mod in self.modules():
            if isinstance(mod, MoE):
                nn.init.normal_(mod.gate_exps, std=std)
                nn.init.normal_(mod.up_exps, std=std)
                nn.init.normal_(mod.down_exps, std=std / math.sqrt(2 * (self.cfg.n_layer + 1)))

    def rope(self, T: int, device=None, offset: int = 0):
        d = self.cfg.head_dim
        inv = self.cfg.rope_base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)
        ang = torch.arange(offset, offset + T, dtype=torch.float64, device=device)[:, None] * inv[None, :]
        return ang.cos().float(), ang.sin().float()

    def head(self, h):
        return h @ self.tok_embd.weight.T if self.output is None else self.output(h)

    def trunk(self, tokens):
        """tokens (B, T) -> (logits (B, T, V), hidden (B, T, E) = output-normed rows for the MTP head)."""
        cos, sin = self.rope(tokens.shape[1], tokens.device)
        x = self.tok_embd(tokens)
        for b in self.blocks:
            x = b(x, cos, sin)
        h = self.output_norm(x)
        return self.head(h), h

    def mtp_forward(self, next_tokens, hidden):
        """next_tokens x(p+1) (B, T), hidden h(p) (B, T, E), positions 0..T-1 ->
        (logits for x(p+2) (B, T, V), MTP hidden (B, T, E))."""
        cos, sin = self.rope(next_tokens.shape[1], next_tokens.device)
        mh = self.mtp(self.tok_embd(next_tokens), hidden, cos, sin)
        return self.head(mh), mh

    def forward(self, tokens):
        """tokens (B, T+1): trunk on tokens[:, :T]; MTP on (tokens[:, 1:T], hidden[:, :T-1])."""
        inp = tokens[:, :-1]
        logits, h = self.trunk(inp)
        mlogits, _ = self.mtp_forward(inp[:, 1:], h[:, :-1])
        return logits, mlogits

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
