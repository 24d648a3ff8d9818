"""A glm4moe NextN head for a frozen trunk: the PyTorch model and its GGUF (head-only) file.

The head mirrors llama.cpp's glm4moe ``graph_mtp`` (see ``model.py`` for the formulas) with
grouped-query attention: at position p it takes token x(p+1) and the trunk's hidden row
h(p) (output-normed) and predicts x(p+2) through the trunk's own output matrix, which stays
frozen and shared (tied embeddings: the token embedding matrix).

The head file is a glm4moe GGUF with only ``blk.<n_trunk>.*`` tensors and the MoE keys;
``pymtp.convert.write_glm4moe(trunk, out, head=...)`` merges it with a converted trunk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .model import MoE, RMSNorm, rope_neox

ARCH = "glm4moe"
GATING_SIGMOID = 2


@dataclass
class HeadConfig:
    n_vocab: int = 49152
    n_embd: int = 576
    n_trunk: int = 30  # trunk blocks: the head is block n_trunk
    n_head: int = 9
    n_head_kv: int = 3
    n_ff: int = 1536  # the trunk's FFN width (unused by the head; kept for reference)
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 384
    n_expert_shared: int = 4  # shared expert width = n_ff_exp * n_expert_shared
    rope_base: float = 100000.0
    norm_eps: float = 1e-5
    expert_weights_norm: bool = True
    expert_weights_scale: float = 1.0

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)


class GQAttention(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        e, d = cfg.n_embd, cfg.head_dim
        self.n_head, self.n_head_kv = cfg.n_head, cfg.n_head_kv
        self.wq = nn.Linear(e, cfg.n_head * d, bias=False)
        self.wk = nn.Linear(e, cfg.n_head_kv * d, bias=False)
        self.wv = nn.Linear(e, cfg.n_head_kv * d, bias=False)
        self.wo = nn.Linear(cfg.n_head * d, e, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_head, -1).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_head_kv, -1).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_head_kv, -1).transpose(1, 2)
        q, k = rope_neox(q, cos, sin), rope_neox(k, cos, sin)
        rep = self.n_head // self.n_head_kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class NextNHead(nn.Module):
    """eh_proj(concat(enorm(emb x(p+1)), hnorm(h(p)))) -> attention + MoE block -> shared_head_norm."""

    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.cfg = cfg
        e = cfg.n_embd
        self.enorm = RMSNorm(e, cfg.norm_eps)
        self.hnorm = RMSNorm(e, cfg.norm_eps)
        self.eh_proj = nn.Linear(2 * e, e, bias=False)
        self.attn_norm = RMSNorm(e, cfg.norm_eps)
        self.attn = GQAttention(cfg)
        self.attn_post_norm = RMSNorm(e, cfg.norm_eps)
        self.ffn = MoE(cfg)  # type: ignore[arg-type]  # uses n_embd, n_expert, n_ff_exp, n_expert_used/shared, weights norm/scale
        self.shared_head_norm = RMSNorm(e, cfg.norm_eps)
        nn.init.normal_(self.eh_proj.weight, std=0.02)

    def rope(self, T: int, offset: int = 0):
        d = self.cfg.head_dim
        inv = self.cfg.rope_base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * inv[None, :]
        return ang.cos().float(), ang.sin().float()

    def forward(self, emb, h):
        """emb: embeddings of x(p+1) (B, T, E); h: trunk rows h(p) (B, T, E), positions 0..T-1
        -> the head's output-normed hidden (B, T, E); logits = hidden @ output.T."""
        cos, sin = self.rope(emb.shape[1])
        x = self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(h)], dim=-1))
        x = x + self.attn(self.attn_norm(x), cos, sin)
        x = x + self.ffn(self.attn_post_norm(x))
        return self.shared_head_norm(x)

    def tensors(self) -> dict[str, torch.Tensor]:
        """llama.cpp tensor name -> tensor (torch Linear (out, in) = ggml {in, out})."""
        n, a, f = self.cfg.n_trunk, self.attn, self.ffn
        shared = f.shared
        assert shared is not None  # the head has a shared expert
        return {
            f"blk.{n}.nextn.eh_proj.weight": self.eh_proj.weight,
            f"blk.{n}.nextn.enorm.weight": self.enorm.weight,
            f"blk.{n}.nextn.hnorm.weight": self.hnorm.weight,
            f"blk.{n}.nextn.shared_head_norm.weight": self.shared_head_norm.weight,
            f"blk.{n}.attn_norm.weight": self.attn_norm.weight,
            f"blk.{n}.attn_q.weight": a.wq.weight,
            f"blk.{n}.attn_k.weight": a.wk.weight,
            f"blk.{n}.attn_v.weight": a.wv.weight,
            f"blk.{n}.attn_output.weight": a.wo.weight,
            f"blk.{n}.post_attention_norm.weight": self.attn_post_norm.weight,
            f"blk.{n}.ffn_gate_inp.weight": f.gate_inp.weight,
            f"blk.{n}.exp_probs_b.bias": f.exp_probs_b,  # type: ignore[dict-item]  # a registered buffer
            f"blk.{n}.ffn_gate_exps.weight": f.gate_exps,
            f"blk.{n}.ffn_up_exps.weight": f.up_exps,
            f"blk.{n}.ffn_down_exps.weight": f.down_exps,
            f"blk.{n}.ffn_gate_shexp.weight": shared.gate.weight,
            f"blk.{n}.ffn_up_shexp.weight": shared.up.weight,
            f"blk.{n}.ffn_down_shexp.weight": shared.down.weight,
        }


def _keep_f32(name: str, t: torch.Tensor) -> bool:
    return t.dim() < 2 or "ffn_gate_inp" in name


def write_head_gguf(head: NextNHead, path: str | Path, *, dtype: str = "F16") -> Path:
    """The head-only GGUF: matrices in F16 (or F32 / Q8_0), norms and the router in F32."""
    import gguf

    cfg = head.cfg
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), ARCH)
    k = lambda s: f"{ARCH}.{s}"
    w.add_string("general.name", "pymtp NextN head")
    w.add_uint32(k("embedding_length"), cfg.n_embd)
    w.add_uint32(k("leading_dense_block_count"), cfg.n_trunk)
    w.add_uint32(k("nextn_predict_layers"), 1)
    w.add_uint32(k("block_count"), cfg.n_trunk + 1)
    w.add_uint32(k("attention.head_count"), cfg.n_head)
    w.add_uint32(k("attention.head_count_kv"), cfg.n_head_kv)
    w.add_uint32(k("expert_count"), cfg.n_expert)
    w.add_uint32(k("expert_used_count"), cfg.n_expert_used)
    w.add_uint32(k("expert_shared_count"), cfg.n_expert_shared)
    w.add_uint32(k("expert_feed_forward_length"), cfg.n_ff_exp)
    w.add_float32(k("expert_weights_scale"), cfg.expert_weights_scale)
    w.add_bool(k("expert_weights_norm"), cfg.expert_weights_norm)
    w.add_uint32(k("expert_gating_func"), GATING_SIGMOID)
    for name, t in head.tensors().items():
        arr = np.ascontiguousarray(t.detach().float().cpu().numpy())
        if _keep_f32(name, t) or dtype == "F32":
            w.add_tensor(name, arr)
        elif dtype == "F16":
            w.add_tensor(name, arr.astype(np.float16))
        elif dtype == "Q8_0":
            q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            raise ValueError(f"dtype must be F32, F16 or Q8_0, got {dtype!r}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gguf_weights(path: Path, names) -> dict[str, np.ndarray]:
    """Dequantized float32 tensors (numpy order) of a GGUF, for the names given."""
    import gguf

    r = gguf.GGUFReader(str(path))
    out = {}
    for t in r.tensors:
        if t.name in names:
            arr = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
            out[t.name] = arr.reshape([int(x) for x in reversed(t.shape)])
    return out


def read_head_gguf(path: str | Path, cfg: HeadConfig) -> NextNHead:
    """The head stored in a head file (or an assembled model), as float32 torch weights."""
    head = NextNHead(cfg)
    weights = gguf_weights(Path(path), set(head.tensors()))
    with torch.no_grad():
        for name, t in head.tensors().items():
            t.copy_(torch.from_numpy(weights[name].reshape(tuple(t.shape))))
    return head.eval()


def init_from_trunk_block(head: NextNHead, weights: dict[str, np.ndarray], layer: int) -> None:
    """Warm start: attention and shared expert from trunk block ``layer`` (the last one),
    routed experts small, so the head starts as that block applied to eh_proj's output."""
    cfg = head.cfg
    g = lambda n: torch.from_numpy(np.ascontiguousarray(weights[f"blk.{layer}.{n}.weight"], dtype=np.float32))
    with torch.no_grad():
        head.attn_norm.weight.copy_(g("attn_norm"))
        head.attn.wq.weight.copy_(g("attn_q"))
        head.attn.wk.weight.copy_(g("attn_k"))
        head.attn.wv.weight.copy_(g("attn_v"))
        head.attn.wo.weight.copy_(g("attn_output"))
        head.attn_post_norm.weight.copy_(g("post_attention_norm"))
        if cfg.n_ff_exp * cfg.n_expert_shared == weights[f"blk.{layer}.ffn_gate.weight"].shape[0]:
            shared = head.ffn.shared
            assert shared is not None  # n_expert_shared > 0 in the head
            shared.gate.weight.copy_(g("ffn_gate"))
            shared.up.weight.copy_(g("ffn_up"))
            shared.down.weight.copy_(g("ffn_down"))
        head.ffn.down_exps.mul_(0.1)
        head.shared_head_norm.weight.copy_(torch.from_numpy(np.ascontiguousarray(weights["output_norm.weight"])))


def num_params(head: NextNHead) -> int:
    return sum(p.numel() for p in head.parameters())
