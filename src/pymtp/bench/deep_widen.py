"""How one glm4moe tensor widens for the deep variant (bench/deep.py's docstring says why the
predictions stay the same): which ggml dimension of each tensor is which width, the
zero-padding, the fused q/k/v split, and the sqrt(d/D) scale of residual-width norms (and of
q/k projections that a q/k norm follows)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Role of each ggml dimension (ne0, ne1, ...) of a block tensor, by name suffix.
# E = n_embd, Q = n_head*head_dim, K = n_head_kv*head_dim, F = dense FFN,
# X = expert FFN, S = shared-expert FFN (X * n_expert_shared), None = unchanged.
_BLOCK_ROLES: dict[str, tuple] = {
    "attn_norm.weight": ("E",),
    "post_attention_norm.weight": ("E",),
    "attn_q.weight": ("E", "Q"),
    "attn_k.weight": ("E", "K"),
    "attn_v.weight": ("E", "K"),
    "attn_q.bias": ("Q",),
    "attn_k.bias": ("K",),
    "attn_v.bias": ("K",),
    "attn_output.weight": ("Q", "E"),
    "attn_q_norm.weight": (None,),
    "attn_k_norm.weight": (None,),
    "ffn_gate.weight": ("E", "F"),
    "ffn_up.weight": ("E", "F"),
    "ffn_down.weight": ("F", "E"),
    "ffn_gate_inp.weight": ("E", None),
    "exp_probs_b.bias": (None,),
    "ffn_gate_exps.weight": ("E", "X", None),
    "ffn_up_exps.weight": ("E", "X", None),
    "ffn_down_exps.weight": ("X", "E", None),
    "ffn_gate_shexp.weight": ("E", "S"),
    "ffn_up_shexp.weight": ("E", "S"),
    "ffn_down_shexp.weight": ("S", "E"),
    "nextn.enorm.weight": ("E",),
    "nextn.hnorm.weight": ("E",),
    "nextn.shared_head_norm.weight": ("E",),
    "nextn.embed_tokens.weight": ("E", None),
    "nextn.shared_head_head.weight": ("E", None),
    # special-cased: nextn.eh_proj.weight (2E, E), attn_qkv.weight / attn_qkv.bias
}
_GLOBAL_ROLES: dict[str, tuple] = {
    "token_embd.weight": ("E", None),
    "output_norm.weight": ("E",),
    "output.weight": ("E", None),
}
# RMSNorm weights over the residual width: scaled by sqrt(d/D).
_RESIDUAL_NORMS = {
    "attn_norm.weight",
    "post_attention_norm.weight",
    "output_norm.weight",
    "nextn.enorm.weight",
    "nextn.hnorm.weight",
    "nextn.shared_head_norm.weight",
}
#: The per-head norms whose presence in a block scales its q (k) projection.
QK_NORMS = frozenset({"attn_q_norm.weight", "attn_k_norm.weight"})


def _pad_corner(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    out = np.zeros(shape, dtype=a.dtype)
    out[tuple(slice(0, n) for n in a.shape)] = a
    return out


def _new_shape(roles: tuple, old_ne: tuple[int, ...], dims: dict, new: dict, name: str) -> tuple[int, ...]:
    """New ggml ne of a tensor, checking each old size against its role."""
    if len(roles) != len(old_ne):
        raise ValueError(f"{name}: expected {len(roles)} dims, got shape {old_ne}")
    ne = []
    for r, n in zip(roles, old_ne):
        if r is None:
            ne.append(n)
            continue
        if n != dims[r]:
            raise ValueError(f"{name}: dim {r} is {n}, expected {dims[r]}")
        ne.append(new[r])
    return tuple(ne)


def _pad_qkv(a: np.ndarray, dims: dict, new: dict) -> np.ndarray:
    """Fused [q; k; v] rows (last numpy axis of a bias, first of a weight)."""
    cuts = [dims["Q"], dims["Q"] + dims["K"]]
    parts = np.split(a, cuts, axis=0)
    sizes = [new["Q"], new["K"], new["K"]]
    padded = [
        _pad_corner(p, (s,) + tuple(new["E"] if i == 1 else x for i, x in enumerate(p.shape[1:], 1)))
        for p, s in zip(parts, sizes)
    ]
    return np.concatenate(padded, axis=0)


@dataclass(frozen=True)
class Widening:
    """The source's widths (``dims``) and the variant's (``new``), by role letter (E, Q, K, F,
    X, S as in _BLOCK_ROLES)."""

    dims: dict[str, int]
    new: dict[str, int]

    @property
    def norm_scale(self) -> float:
        return math.sqrt(self.dims["E"] / self.new["E"])

    def tensor(
        self, suffix: str, a: np.ndarray, ne_old: tuple, name: str, *, in_block: bool, qk_norm: frozenset = frozenset()
    ) -> np.ndarray:
        """The widened copy of tensor ``name`` (its name's suffix past ``blk.N.``; its data
        ``a`` and ggml ne ``ne_old``); ``qk_norm``: the QK_NORMS its block has."""
        d, D = self.dims["E"], self.new["E"]
        dims, new, norm_scale = self.dims, self.new, self.norm_scale
        if suffix == "nextn.eh_proj.weight":
            if ne_old != (2 * d, d):
                raise ValueError(f"{name}: expected ne {(2 * d, d)}, got {ne_old}")
            out = np.zeros((D, 2 * D), dtype=a.dtype)
            out[:d, :d] = a[:, :d]
            out[:d, D : D + d] = a[:, d:]
            return out
        if suffix in ("attn_qkv.weight", "attn_qkv.bias"):
            if suffix == "attn_qkv.weight":
                out = _pad_qkv(a, dims, new)
            else:
                out = _pad_qkv(a[:, None], dims, {**new, "E": 1})[:, 0]
            q_s = norm_scale if "attn_q_norm.weight" in qk_norm else 1.0
            k_s = norm_scale if "attn_k_norm.weight" in qk_norm else 1.0
            if q_s != 1.0 or k_s != 1.0:
                out = out.astype(np.float32)
                out[: new["Q"]] *= q_s
                out[new["Q"] : new["Q"] + new["K"]] *= k_s
                out = out.astype(a.dtype)
            return out
        roles = (_BLOCK_ROLES if in_block else _GLOBAL_ROLES).get(suffix)
        if roles is None:
            raise ValueError(f"make_deep does not know how to widen {name}")
        ne = _new_shape(roles, ne_old, dims, new, name)
        out = _pad_corner(a, tuple(reversed(ne)))
        scale = 1.0
        if suffix in _RESIDUAL_NORMS:
            scale = norm_scale
        elif suffix.startswith("attn_q.") and "attn_q_norm.weight" in qk_norm:
            scale = norm_scale
        elif suffix.startswith("attn_k.") and "attn_k_norm.weight" in qk_norm:
            scale = norm_scale
        if scale != 1.0:
            out = (out.astype(np.float64) * scale).astype(a.dtype)
        return out
