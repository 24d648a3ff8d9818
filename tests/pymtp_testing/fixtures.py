"""Tiny seeded random-weight GGUF models in the real MTP architectures, for tests.

Each fixture is under about 1 MB of F32 weights written with the ``gguf`` package
(``pip install 'pymtp-llm[models]'``) in about a tenth of a second, and loads in the
pinned llama.cpp with its MTP / NextN blocks::

    from pymtp_testing.fixtures import FAMILIES, fixture_path, make_fixture
    path = fixture_path("glm4moe")                # cached, generated once per seed
    make_fixture("qwen35", "/tmp/q.gguf", seed=3, noise=0.1)

Families (``FAMILIES``, MTP head count in brackets): ``glm4moe`` [1] (dense
trunk + a routed-MoE NextN block, sigmoid routing with ``exp_probs_b``, one shared
expert), ``qwen35`` [1] (hybrid Gated DeltaNet + gated attention; recurrent
rollback), ``step35`` [3 chained] (sliding-window/full trunk, head-wise attention
gate, MoE), ``qwen35moe`` [1], ``qwen3next`` [1] (hybrid, no rollback in llama.cpp:
checkpoints), ``deepseek2`` [1] (MLA attention, GLM-4.7-Flash style),
``mimo2`` [3 chained] (SWA with attention sinks). ``glm4moe-nomtp``
(``PLAIN_FAMILIES``) are the glm4moe trunk without MTP blocks and a plain llama (for pymtp.convert).

Default sizes: n_embd 64, 2 trunk blocks, 4 heads of 16 (2 KV heads), FFN 128,
4 experts of 32 (2 used), vocab 304, context 2048, all F32 (0.7-1.1 MB a file).

How acceptance is made neither 0 nor 1: every block adds only a small residual
(its output projections are scaled by ``noise``), so a hidden row stays close to
its token's embedding and the trunk behaves like a bigram model
``next = argmax(W_out . norm(E[x]))``. The NextN ``eh_proj`` is ``[I, 0]`` plus
noise, so the head, fed token x(p) and hidden row h(p-1), also predicts about
``argmax(W_out . norm(E[x(p)]))`` = the trunk's prediction at p. ``noise`` moves
both away from that shared bigram map: 0 gives near-total agreement, 1 almost
none; the default gives roughly 40-70 % greedy agreement. ``logit_scale`` sets
how peaked the logits are (the greedy continuation wanders through a random
functional graph, it is not constant).

The byte-level vocabulary (``add_byte_bpe_vocab``, from ``pymtp.bench.byte_vocab``) holds
the 256 GPT-2 byte tokens, a few dozen merges and two control tokens, so any UTF-8 text
round-trips.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from pymtp import cache
from pymtp.bench.byte_vocab import add_byte_bpe_vocab, byte_vocab, bytes_to_unicode

__all__ = [
    "FAMILIES",
    "PLAIN_FAMILIES",
    "FIXTURE_VERSION",
    "FixtureConfig",
    "add_byte_bpe_vocab",
    "byte_vocab",
    "bytes_to_unicode",
    "fixture_path",
    "make_fixture",
]

#: Bump when the generated files change (the cache key includes it).
FIXTURE_VERSION = 1

# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FixtureConfig:
    """Sizes and weight scales; ``make_fixture(..., **overrides)`` replaces fields."""

    n_embd: int = 64
    n_trunk: int = 2  # trunk blocks
    n_mtp: int | None = None  # MTP blocks (None: the family's own; 0 = no MTP)
    mtp: bool = True  # False: write no MTP block at all
    n_ctx: int = 2048
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 128
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 32
    noise: float = 0.25  # deviation from the agreeing solution (0: agree, 1: random)
    logit_scale: float = 6.0  # std of the logits (peakedness)
    rms_eps: float = 1e-6
    chat_template: str | None = None  # tokenizer.chat_template (Jinja), for chat tests


# ---------------------------------------------------------------------------------------------
# weights
# ---------------------------------------------------------------------------------------------


class _Weights:
    """Collects named F32 tensors (numpy layout = torch layout: (out, in))."""

    def __init__(self, cfg: FixtureConfig, rng: np.random.Generator) -> None:
        self.cfg = cfg
        self.rng = rng
        self.tensors: dict[str, np.ndarray] = {}

    def put(self, name: str, arr: np.ndarray) -> None:
        if name in self.tensors:
            raise AssertionError(f"duplicate tensor {name}")
        self.tensors[name] = np.ascontiguousarray(arr, dtype=np.float32)

    def mat(self, name: str, *shape: int, scale: float = 1.0) -> None:
        """Random matrix, std scale/sqrt(fan_in) (fan_in = last dim)."""
        self.put(name, self.rng.standard_normal(shape) * (scale / np.sqrt(shape[-1])))

    def ones(self, name: str, n: int) -> None:
        self.put(name, np.ones(n))

    def vec(self, name: str, n: int, scale: float = 0.1) -> None:
        self.put(name, self.rng.standard_normal(n) * scale)

    # ---- shared pieces -----------------------------------------------------------------------

    def embeddings(self, n_vocab: int, *, output: bool = True) -> None:
        c = self.cfg
        self.put("token_embd.weight", self.rng.standard_normal((n_vocab, c.n_embd)))
        self.ones("output_norm.weight", c.n_embd)
        if output:
            # logits = W . x with rms(x) = 1  ->  std(logits) = logit_scale
            self.mat("output.weight", n_vocab, c.n_embd, scale=c.logit_scale)

    def ffn(self, b: str, n_ff: int, out_scale: float) -> None:
        d = self.cfg.n_embd
        self.mat(f"{b}.ffn_gate.weight", n_ff, d)
        self.mat(f"{b}.ffn_up.weight", n_ff, d)
        self.mat(f"{b}.ffn_down.weight", d, n_ff, scale=out_scale)

    def moe(
        self, b: str, out_scale: float, *, n_ff_shexp: int | None, probs_b: bool = True, gate_inp_shexp: bool = False
    ) -> None:
        c = self.cfg
        d, e, f = c.n_embd, c.n_expert, c.n_ff_exp
        self.mat(f"{b}.ffn_gate_inp.weight", e, d)
        if probs_b:
            self.vec(f"{b}.exp_probs_b.bias", e, 0.05)
        self.mat(f"{b}.ffn_gate_exps.weight", e, f, d)
        self.mat(f"{b}.ffn_up_exps.weight", e, f, d)
        self.mat(f"{b}.ffn_down_exps.weight", e, d, f, scale=out_scale)
        if n_ff_shexp:
            self.mat(f"{b}.ffn_gate_shexp.weight", n_ff_shexp, d)
            self.mat(f"{b}.ffn_up_shexp.weight", n_ff_shexp, d)
            self.mat(f"{b}.ffn_down_shexp.weight", d, n_ff_shexp, scale=out_scale)
        if gate_inp_shexp:
            self.put(f"{b}.ffn_gate_inp_shexp.weight", self.rng.standard_normal(d) / np.sqrt(d))

    def attn(
        self,
        b: str,
        out_scale: float,
        *,
        q_mult: int = 1,
        bias: bool = False,
        qk_norm: bool = False,
        n_head: int | None = None,
        n_head_kv: int | None = None,
    ) -> None:
        c = self.cfg
        d, hd = c.n_embd, c.head_dim
        nh = n_head or c.n_head
        nkv = n_head_kv or c.n_head_kv
        self.mat(f"{b}.attn_q.weight", hd * nh * q_mult, d)
        self.mat(f"{b}.attn_k.weight", hd * nkv, d)
        self.mat(f"{b}.attn_v.weight", hd * nkv, d)
        if bias:
            self.vec(f"{b}.attn_q.bias", hd * nh * q_mult)
            self.vec(f"{b}.attn_k.bias", hd * nkv)
            self.vec(f"{b}.attn_v.bias", hd * nkv)
        self.mat(f"{b}.attn_output.weight", d, hd * nh, scale=out_scale)
        if qk_norm:
            self.ones(f"{b}.attn_q_norm.weight", hd)
            self.ones(f"{b}.attn_k_norm.weight", hd)

    def nextn(self, b: str, *, shared_head_norm: bool = True) -> None:
        """eh_proj = [I, 0] + noise: the head mostly follows its input token's embedding."""
        c = self.cfg
        d = c.n_embd
        eh = np.concatenate([np.eye(d), np.zeros((d, d))], axis=1)
        eh += self.rng.standard_normal((d, 2 * d)) * (c.noise * 0.5 / np.sqrt(d))
        self.put(f"{b}.nextn.eh_proj.weight", eh)
        self.ones(f"{b}.nextn.enorm.weight", d)
        self.ones(f"{b}.nextn.hnorm.weight", d)
        if shared_head_norm:
            self.ones(f"{b}.nextn.shared_head_norm.weight", d)


# ---------------------------------------------------------------------------------------------
# families
# ---------------------------------------------------------------------------------------------


@dataclass
class _Family:
    arch: str
    n_mtp: int
    build: Callable[[Any, _Weights, FixtureConfig, int, int], None]  # (writer, w, cfg, n_vocab, n_mtp)


def _common_kv(wr, arch: str, c: FixtureConfig, n_trunk: int, n_mtp: int, *, heads: bool = True) -> None:
    wr.add_uint32(f"{arch}.context_length", c.n_ctx)
    wr.add_uint32(f"{arch}.embedding_length", c.n_embd)
    wr.add_uint32(f"{arch}.block_count", n_trunk + n_mtp)
    if n_mtp:
        wr.add_uint32(f"{arch}.nextn_predict_layers", n_mtp)
    wr.add_uint32(f"{arch}.feed_forward_length", c.n_ff)
    if heads:
        wr.add_uint32(f"{arch}.attention.head_count", c.n_head)
        wr.add_uint32(f"{arch}.attention.head_count_kv", c.n_head_kv)
        wr.add_uint32(f"{arch}.attention.key_length", c.head_dim)
        wr.add_uint32(f"{arch}.attention.value_length", c.head_dim)
    wr.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", c.rms_eps)
    wr.add_float32(f"{arch}.rope.freq_base", 10000.0)


def _moe_kv(
    wr,
    arch: str,
    c: FixtureConfig,
    *,
    shared: int | None = 1,
    gating: int | None = 2,
    norm: bool = True,
    scale: float = 1.0,
) -> None:
    wr.add_uint32(f"{arch}.expert_count", c.n_expert)
    wr.add_uint32(f"{arch}.expert_used_count", c.n_expert_used)
    wr.add_uint32(f"{arch}.expert_feed_forward_length", c.n_ff_exp)
    if shared is not None:
        wr.add_uint32(f"{arch}.expert_shared_count", shared)
    if gating is not None:
        wr.add_uint32(f"{arch}.expert_gating_func", gating)  # 1 softmax, 2 sigmoid
    wr.add_bool(f"{arch}.expert_weights_norm", norm)
    wr.add_float32(f"{arch}.expert_weights_scale", scale)


def _build_glm4moe(wr, w: _Weights, c: FixtureConfig, n_vocab: int, n_mtp: int) -> None:
    arch, n = "glm4moe", c.n_trunk
    _common_kv(wr, arch, c, n, n_mtp)
    _moe_kv(wr, arch, c, shared=1, gating=2)
    wr.add_uint32(f"{arch}.leading_dense_block_count", n)  # every trunk block dense, the NextN block MoE
    wr.add_uint32(f"{arch}.rope.dimension_count", c.head_dim // 2)  # GLM: partial rotary 0.5
    w.embeddings(n_vocab)
    s = c.noise
    for i in range(n + n_mtp):
        b = f"blk.{i}"
        w.ones(f"{b}.attn_norm.weight", c.n_embd)
        w.ones(f"{b}.post_attention_norm.weight", c.n_embd)
        w.attn(b, s, bias=True)
        if i < n:
            w.ffn(b, c.n_ff, s)
        else:
            w.moe(b, s, n_ff_shexp=c.n_ff_exp)
            w.nextn(b)


def _qwen35_kv(wr, arch: str, c: FixtureConfig) -> tuple[int, int, int, int]:
    # Gated DeltaNet: head_k_dim = state_size, v heads = time_step_rank, inner = v heads * state_size
    d_state, n_group, n_v = 16, 2, 2
    wr.add_uint32(f"{arch}.ssm.conv_kernel", 4)
    wr.add_uint32(f"{arch}.ssm.state_size", d_state)
    wr.add_uint32(f"{arch}.ssm.group_count", n_group)
    wr.add_uint32(f"{arch}.ssm.time_step_rank", n_v)
    wr.add_uint32(f"{arch}.ssm.inner_size", n_v * d_state)
    wr.add_uint32(f"{arch}.full_attention_interval", 2)  # blocks 0 DeltaNet, 1 attention, ...
    wr.add_uint32(f"{arch}.rope.dimension_count", c.head_dim // 2)
    from gguf import GGUFValueType

    # n_rot / 2 = 4 rotary pairs: sections t/h/w = 2/1/1 (text positions use all equal)
    wr.add_key_value(f"{arch}.rope.dimension_sections", [2, 1, 1, 0], GGUFValueType.ARRAY, GGUFValueType.INT32)
    return d_state, n_group, n_v, 4


def _deltanet(
    w: _Weights, b: str, d_state: int, n_group: int, n_v: int, k_conv: int, s: float, *, fused_ba: bool = False
) -> None:
    d = w.cfg.n_embd
    key_dim, value_dim = d_state * n_group, d_state * n_v
    conv_dim = 2 * key_dim + value_dim
    w.mat(f"{b}.attn_qkv.weight", conv_dim, d)
    w.mat(f"{b}.attn_gate.weight", value_dim, d)
    w.put(f"{b}.ssm_conv1d.weight", w.rng.standard_normal((conv_dim, k_conv)) / np.sqrt(k_conv))
    w.vec(f"{b}.ssm_dt.bias", n_v, 0.5)
    w.put(f"{b}.ssm_a", -np.exp(w.rng.uniform(-1.0, 1.0, n_v)))  # -exp(A_log)
    if fused_ba:  # qwen3next: [beta, alpha] per k-head group
        w.mat(f"{b}.ssm_ba.weight", 2 * n_v, d)
    else:
        w.mat(f"{b}.ssm_beta.weight", n_v, d)
        w.mat(f"{b}.ssm_alpha.weight", n_v, d)
    w.ones(f"{b}.ssm_norm.weight", d_state)
    w.mat(f"{b}.ssm_out.weight", d, value_dim, scale=s)


def _build_qwen35(wr, w: _Weights, c: FixtureConfig, n_vocab: int, n_mtp: int, *, moe: bool = False) -> None:
    arch, n = ("qwen35moe" if moe else "qwen35"), c.n_trunk
    _common_kv(wr, arch, c, n, n_mtp)
    if moe:
        _moe_kv(wr, arch, c, shared=None, gating=None, norm=True)
        wr.add_uint32(f"{arch}.expert_shared_feed_forward_length", c.n_ff_exp)
    d_state, n_group, n_v, k_conv = _qwen35_kv(wr, arch, c)
    w.embeddings(n_vocab)
    s = c.noise
    for i in range(n + n_mtp):
        b = f"blk.{i}"
        w.ones(f"{b}.attn_norm.weight", c.n_embd)
        w.ones(f"{b}.post_attention_norm.weight", c.n_embd)
        if i < n and (i + 1) % 2 != 0:
            _deltanet(w, b, d_state, n_group, n_v, k_conv, s)
        else:
            w.attn(b, s, q_mult=2, qk_norm=True)  # query + output gate
        if moe:
            w.moe(b, s, n_ff_shexp=c.n_ff_exp, probs_b=False, gate_inp_shexp=True)
        else:
            w.ffn(b, c.n_ff, s)
        if i >= n:
            w.nextn(b)


def _build_step35(wr, w: _Weights, c: FixtureConfig, n_vocab: int, n_mtp: int) -> None:
    from gguf import GGUFValueType

    arch, n = "step35", c.n_trunk
    n_all = n + n_mtp
    _common_kv(wr, arch, c, n, n_mtp, heads=False)
    _moe_kv(wr, arch, c, shared=None, gating=2)
    wr.add_uint32(f"{arch}.expert_shared_feed_forward_length", c.n_ff_exp)
    wr.add_uint32(f"{arch}.leading_dense_block_count", 1)
    # odd trunk blocks slide; the MTP blocks are full attention (as the converter pads them)
    swa = [i < n and i % 2 == 1 for i in range(n_all)]
    n_head_swa = c.n_head // 2 if c.n_head % 2 == 0 else c.n_head
    heads = [n_head_swa if s else c.n_head for s in swa]
    kv = [
        c.n_head_kv // 2 if (s and c.n_head_kv % 2 == 0 and n_head_swa % (c.n_head_kv // 2) == 0) else c.n_head_kv
        for s in swa
    ]
    wr.add_key_value(f"{arch}.attention.head_count", heads, GGUFValueType.ARRAY, GGUFValueType.INT32)
    wr.add_key_value(f"{arch}.attention.head_count_kv", kv, GGUFValueType.ARRAY, GGUFValueType.INT32)
    wr.add_uint32(f"{arch}.attention.key_length", c.head_dim)
    wr.add_uint32(f"{arch}.attention.value_length", c.head_dim)
    wr.add_uint32(f"{arch}.attention.sliding_window", 16)
    wr.add_key_value(f"{arch}.attention.sliding_window_pattern", swa, GGUFValueType.ARRAY, GGUFValueType.BOOL)
    wr.add_uint32(f"{arch}.rope.dimension_count", c.head_dim)  # full-attention blocks rotate half of it
    wr.add_float32(f"{arch}.rope.freq_base_swa", 10000.0)
    w.embeddings(n_vocab)
    s = c.noise
    for i in range(n_all):
        b = f"blk.{i}"
        w.ones(f"{b}.attn_norm.weight", c.n_embd)
        w.ones(f"{b}.ffn_norm.weight", c.n_embd)
        w.attn(b, s, qk_norm=True, n_head=heads[i], n_head_kv=kv[i])
        w.mat(f"{b}.attn_gate.weight", heads[i], c.n_embd)  # head-wise output gate
        if i == 0:
            w.ffn(b, c.n_ff, s)
        else:
            w.moe(b, s, n_ff_shexp=c.n_ff_exp)
        if i >= n:
            w.nextn(b)


def _build_qwen3next(wr, w: _Weights, c: FixtureConfig, n_vocab: int, n_mtp: int) -> None:
    arch, n = "qwen3next", c.n_trunk
    _common_kv(wr, arch, c, n, n_mtp)
    _moe_kv(wr, arch, c, shared=None, gating=None, norm=True)
    wr.add_uint32(f"{arch}.expert_shared_feed_forward_length", c.n_ff_exp)
    d_state, n_group, n_v, k_conv = 16, 2, 2, 4
    for key, val in (
        ("conv_kernel", k_conv),
        ("state_size", d_state),
        ("group_count", n_group),
        ("time_step_rank", n_v),
        ("inner_size", n_v * d_state),
    ):
        wr.add_uint32(f"{arch}.ssm.{key}", val)
    wr.add_uint32(f"{arch}.full_attention_interval", 2)
    wr.add_uint32(f"{arch}.rope.dimension_count", c.head_dim // 4)
    w.embeddings(n_vocab)
    s = c.noise
    for i in range(n + n_mtp):
        b = f"blk.{i}"
        w.ones(f"{b}.attn_norm.weight", c.n_embd)
        w.ones(f"{b}.post_attention_norm.weight", c.n_embd)
        if i < n and (i + 1) % 2 != 0:
            _deltanet(w, b, d_state, n_group, n_v, k_conv, s, fused_ba=True)
        else:
            w.attn(b, s, q_mult=2, qk_norm=True)
        w.moe(b, s, n_ff_shexp=c.n_ff_exp, probs_b=False, gate_inp_shexp=True)
        if i >= n:
            w.nextn(b)


def _build_deepseek2(wr, w: _Weights, c: FixtureConfig, n_vocab: int, n_mtp: int) -> None:
    """GLM-4.7-Flash style: MLA attention (q/kv LoRA, absorbed k_b / v_b), dense lead, MoE NextN block."""
    arch, n = "deepseek2", c.n_trunk
    q_lora, kv_lora, rope, nope, v_mla = 32, 32, 8, 16, 16
    _common_kv(wr, arch, c, n, n_mtp, heads=False)
    wr.add_uint32(f"{arch}.attention.head_count", c.n_head)
    wr.add_uint32(f"{arch}.attention.head_count_kv", 1)  # MLA as MQA over the latent
    wr.add_uint32(f"{arch}.attention.key_length", kv_lora + rope)
    wr.add_uint32(f"{arch}.attention.value_length", kv_lora)
    wr.add_uint32(f"{arch}.attention.key_length_mla", nope + rope)
    wr.add_uint32(f"{arch}.attention.value_length_mla", v_mla)
    wr.add_uint32(f"{arch}.attention.q_lora_rank", q_lora)
    wr.add_uint32(f"{arch}.attention.kv_lora_rank", kv_lora)
    wr.add_uint32(f"{arch}.rope.dimension_count", rope)
    wr.add_uint32(f"{arch}.vocab_size", n_vocab)
    _moe_kv(wr, arch, c, shared=1, gating=2)
    wr.add_uint32(f"{arch}.leading_dense_block_count", n)
    w.embeddings(n_vocab)
    s, d, h = c.noise, c.n_embd, c.n_head
    for i in range(n + n_mtp):
        b = f"blk.{i}"
        w.ones(f"{b}.attn_norm.weight", d)
        w.ones(f"{b}.attn_q_a_norm.weight", q_lora)
        w.ones(f"{b}.attn_kv_a_norm.weight", kv_lora)
        w.mat(f"{b}.attn_q_a.weight", q_lora, d)
        w.mat(f"{b}.attn_q_b.weight", h * (nope + rope), q_lora)
        w.mat(f"{b}.attn_kv_a_mqa.weight", kv_lora + rope, d)
        w.mat(f"{b}.attn_k_b.weight", h, kv_lora, nope)
        w.mat(f"{b}.attn_v_b.weight", h, v_mla, kv_lora)
        w.mat(f"{b}.attn_output.weight", d, h * v_mla, scale=s)
        w.ones(f"{b}.ffn_norm.weight", d)
        if i < n:
            w.ffn(b, c.n_ff, s)
        else:
            w.moe(b, s, n_ff_shexp=c.n_ff_exp)
            w.nextn(b)


def _build_mimo2(wr, w: _Weights, c: FixtureConfig, n_vocab: int, n_mtp: int) -> None:
    """MiMo-V2: SWA/full hybrid with attention sinks, MoE trunk, dense chained MTP heads (fused qkv)."""
    from gguf import GGUFValueType

    arch, n = "mimo2", c.n_trunk
    n_all = n + n_mtp
    _common_kv(wr, arch, c, n, n_mtp)
    wr.add_uint32(f"{arch}.expert_count", c.n_expert)
    wr.add_uint32(f"{arch}.expert_used_count", c.n_expert_used)
    wr.add_uint32(f"{arch}.expert_feed_forward_length", c.n_ff_exp)
    wr.add_uint32(f"{arch}.attention.sliding_window", 16)
    swa = [i % 2 == 1 for i in range(n_all)]  # the MTP heads alternate too
    wr.add_key_value(f"{arch}.attention.sliding_window_pattern", swa, GGUFValueType.ARRAY, GGUFValueType.BOOL)
    wr.add_float32(f"{arch}.rope.freq_base_swa", 10000.0)
    w.embeddings(n_vocab)
    s, d, hd = c.noise, c.n_embd, c.head_dim
    for i in range(n_all):
        b = f"blk.{i}"
        w.ones(f"{b}.attn_norm.weight", d)
        w.ones(f"{b}.ffn_norm.weight", d)
        w.mat(f"{b}.attn_qkv.weight", hd * (c.n_head + 2 * c.n_head_kv), d)
        w.mat(f"{b}.attn_output.weight", d, hd * c.n_head, scale=s)
        w.vec(f"{b}.attn_sinks.weight", c.n_head, 0.5)
        if i == 0 or i >= n:
            w.ffn(b, c.n_ff, s)
        else:
            w.moe(b, s, n_ff_shexp=None)
        if i >= n:
            w.nextn(b)


def _build_llama(wr, w: _Weights, c: FixtureConfig, n_vocab: int, n_mtp: int) -> None:
    """A plain llama (no MTP graph in llama.cpp; pymtp.convert re-expresses it as glm4moe)."""
    arch, n = "llama", c.n_trunk
    if n_mtp:
        raise ValueError("llama has no MTP blocks")
    _common_kv(wr, arch, c, n, 0)
    wr.add_uint32(f"{arch}.rope.dimension_count", c.head_dim)
    w.embeddings(n_vocab, output=False)  # tied output, as SmolLM2
    for i in range(n):
        b = f"blk.{i}"
        w.ones(f"{b}.attn_norm.weight", c.n_embd)
        w.ones(f"{b}.ffn_norm.weight", c.n_embd)
        w.attn(b, c.noise)
        w.ffn(b, c.n_ff, c.noise)


_FAMILIES: dict[str, _Family] = {
    "glm4moe": _Family("glm4moe", 1, _build_glm4moe),
    "qwen35": _Family("qwen35", 1, _build_qwen35),
    "step35": _Family("step35", 3, _build_step35),
    "qwen35moe": _Family("qwen35moe", 1, lambda *a: _build_qwen35(*a, moe=True)),
    "qwen3next": _Family("qwen3next", 1, _build_qwen3next),
    "deepseek2": _Family("deepseek2", 1, _build_deepseek2),
    "mimo2": _Family("mimo2", 3, _build_mimo2),
}

#: Families with MTP blocks, most important first.
FAMILIES: tuple[str, ...] = tuple(_FAMILIES)
_FAMILIES["llama"] = _Family("llama", 0, _build_llama)
#: Families without MTP blocks: name -> (family, overrides).
_PLAIN: dict[str, tuple[str, dict[str, Any]]] = {
    "glm4moe-nomtp": ("glm4moe", {"mtp": False}),
    "llama": ("llama", {"mtp": False}),
}
PLAIN_FAMILIES: tuple[str, ...] = tuple(_PLAIN)


def _resolve(family: str, overrides: dict[str, Any]) -> tuple[_Family, FixtureConfig]:
    if family in _PLAIN:
        base, extra = _PLAIN[family]
        family, overrides = base, {**extra, **overrides}
    if family not in _FAMILIES:
        raise ValueError(f"unknown fixture family {family!r}; known: {', '.join(FAMILIES + PLAIN_FAMILIES)}")
    names = {f.name for f in fields(FixtureConfig)}
    bad = sorted(set(overrides) - names)
    if bad:
        raise ValueError(f"unknown fixture option(s) {bad}; known: {sorted(names)}")
    return _FAMILIES[family], replace(FixtureConfig(), **overrides)


def make_fixture(family: str, path: str | os.PathLike, *, seed: int = 0, **overrides: Any) -> Path:
    """Write a random-weight GGUF of ``family`` to ``path`` and return the path.

    ``overrides`` replace ``FixtureConfig`` fields (``noise``, ``n_embd``,
    ``n_mtp``, ``mtp=False`` ...). The same family, seed and overrides always
    give the same bytes."""
    try:
        from gguf import GGUFWriter
    except ImportError as e:  # pragma: no cover
        raise ImportError("pymtp_testing.fixtures needs the gguf package: pip install 'pymtp-llm[models]'") from e

    fam, cfg = _resolve(family, overrides)
    n_mtp = 0 if not cfg.mtp else (fam.n_mtp if cfg.n_mtp is None else cfg.n_mtp)
    if n_mtp < 0 or cfg.n_trunk < 1:
        raise ValueError("n_trunk must be >= 1 and n_mtp >= 0")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    tokens, merges, types = byte_vocab()
    bos, eos = tokens.index("<|bos|>"), tokens.index("<|eos|>")
    rng = np.random.default_rng([seed, FIXTURE_VERSION, sum(fam.arch.encode())])
    w = _Weights(cfg, rng)

    wr = GGUFWriter(str(path), fam.arch)
    wr.add_string("general.name", f"pymtp-fixture-{fam.arch}{'' if n_mtp else '-nomtp'}-s{seed}")
    wr.add_uint32("general.file_type", 0)  # all F32
    wr.add_uint32("general.quantization_version", 2)
    fam.build(wr, w, cfg, len(tokens), n_mtp)
    add_byte_bpe_vocab(wr, tokens, merges, types, bos=bos, eos=eos, add_bos=True, chat_template=cfg.chat_template)
    for name, arr in w.tensors.items():
        wr.add_tensor(name, arr)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return path


def fixture_path(family: str, *, seed: int = 0, cache_dir: str | os.PathLike | None = None, **overrides: Any) -> Path:
    """The path of a cached fixture, generated on first use.

    Cached under ``cache_dir`` (default ``$PYMTP_CACHE_DIR/fixtures`` or
    ``~/.cache/pymtp/fixtures``), keyed by family, seed, overrides and
    ``FIXTURE_VERSION``; written to a temporary file and renamed, so parallel
    processes may race safely."""
    _resolve(family, overrides)  # validate early
    d = Path(cache_dir) if cache_dir is not None else cache.cache_dir("fixtures")
    name = f"{family}-s{seed}-v{FIXTURE_VERSION}"
    if overrides:
        digest = hashlib.sha256(json.dumps(overrides, sort_keys=True, default=str).encode()).hexdigest()[:10]
        name += f"-{digest}"
    return cache.cached_file(d / f"{name}.gguf", lambda tmp: make_fixture(family, tmp, seed=seed, **overrides))


def _parse_value(v: str) -> Any:
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    return v


def main(argv: Sequence[str] | None = None) -> int:
    """Print the cached path of a fixture (generated on first use), e.g. for ``pymtp bench``::

    PYTHONPATH=tests python -m pymtp_testing.fixtures glm4moe noise=0.1
    pymtp bench --model "deep:$(PYTHONPATH=tests python -m pymtp_testing.fixtures glm4moe)"
    """
    ap = argparse.ArgumentParser(
        prog="python -m pymtp_testing.fixtures", description="Print the path of a cached random-weight fixture GGUF."
    )
    ap.add_argument("family", choices=sorted(FAMILIES) + sorted(PLAIN_FAMILIES))
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="FixtureConfig fields, e.g. noise=0.1")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    over = {}
    for kv in args.overrides:
        k, sep, v = kv.partition("=")
        if not sep:
            ap.error(f"expected KEY=VALUE, got {kv!r}")
        over[k.strip()] = _parse_value(v.strip())
    try:
        print(fixture_path(args.family, seed=args.seed, **over))
    except (TypeError, ValueError) as e:
        print(f"pymtp_testing.fixtures: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
