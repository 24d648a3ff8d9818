"""A deep, wide variant of a small glm4moe GGUF that predicts exactly the same tokens.

Tiny models are dominated by per-call overhead, so speedups measured on them say
little about real ones. ``make_deep`` turns a small ``glm4moe`` GGUF (dense trunk
blocks, one NextN/MTP block with a routed-MoE FFN) into a model with a realistic
trunk-to-head cost ratio (e.g. 1024 wide, 16+ more trunk blocks against one MTP
block) whose greedy output and MTP acceptance are those of the source::

    from pymtp.bench.deep import deep_variant_path
    path = deep_variant_path()                  # the bundled default, 1024 wide, +16 blocks
    python -m pymtp.bench.deep --src model.gguf --n-embd 1024 --extra-layers 16

How the predictions stay the same (llama.cpp 0c1e57098bba, src/models/glm4-moe.cpp):

* Width d -> D: every tensor is zero-padded; a residual row becomes ``[x, 0]``.
  Extra attention heads have zero q/k/v rows and zero ``attn_output`` columns and
  come after the original ones with the GQA ratio kept, so original query heads
  still read the same KV heads; extra FFN / expert / shared-expert units have zero
  gate/up rows and zero down columns (silu(0) * 0 = 0); router columns over the
  padding are zero, so routing is unchanged. ``eh_proj`` sees
  ``concat(enorm(e), hnorm(h))`` of width 2D: the original e-block goes to input
  columns [0, d), the h-block to [D, D+d).
* RMSNorm over a padded row: every residual-width norm (attn_norm,
  post_attention_norm, output_norm, NextN enorm/hnorm/shared_head_norm) computes
  ``y = x / sqrt(sum(x^2)/D + eps') * w'``. With ``eps' = eps*d/D`` the root is
  ``sqrt(d/D) * sqrt(mean_d(x^2) + eps)``, so ``w' = w*sqrt(d/D)`` gives ``y``
  exactly. When D/d is a power of 4 (64->1024, 256->1024) sqrt(d/D) and d/D are
  powers of 2 and even the rounding is the same (trunk logits come out bitwise
  equal); other ratios (e.g. 64->128) round the scaled weights and eps, ~1e-5
  relative.
  Only one epsilon key exists: q/k norms (over the unchanged head dim) would see
  eps' too, so when a block has them its q (k) projection and bias are scaled by
  ``sqrt(d/D)``: ``rms(s q; eps s^2) == rms(q; eps)``.
* Head dim, rope dims and the attention scale 1/sqrt(head_dim) are unchanged
  (``key_length``/``value_length``/``rope.dimension_count`` are written explicitly).
* Depth: ``n_extra_layers`` blocks, shaped like the last trunk block, are inserted
  after the trunk and before the NextN block (which is renumbered); their weights
  are seeded small random values except ``attn_output`` and the FFN down
  projections, which are exactly zero, so each adds 0 to the residual stream.

The outputs are equal up to float rounding: with a power-of-4 width ratio the
fixture's trunk logits are bitwise equal and its MTP logits within ~2e-6 (scale
~20); greedy tokens and MTP acceptance are identical.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .. import cache
from .deep_widen import QK_NORMS, Widening
from .gguf_copy import ARCH, copy_fields, finish, read_source, scalar, source_key, tensor_array

__all__ = ["DEEP_VERSION", "deep_variant_path", "make_deep"]

#: Bump when the generated files change (the cache key includes it).
DEEP_VERSION = 1

# Projections whose output an extra block must leave at exactly zero.
_ZERO_IN_EXTRA = {"attn_output.weight", "ffn_down.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight"}

_BLK = re.compile(r"^blk\.(\d+)\.(.+)$")


# ---------------------------------------------------------------------------------------------
# make_deep
# ---------------------------------------------------------------------------------------------


def make_deep(
    src_gguf: str | os.PathLike,
    dst_gguf: str | os.PathLike,
    *,
    n_embd: int = 1024,
    n_extra_layers: int = 16,
    n_head: int | None = None,
    n_ff: int | None = None,
    n_ff_exp: int | None = None,
    seed: int = 0,
) -> Path:
    """Write a deep, wide variant of the glm4moe GGUF ``src_gguf`` to ``dst_gguf``.

    n_embd: residual width D (>= the source's d); n_extra_layers: zero-output trunk
    blocks added after the trunk; n_head: query heads (default: scaled by D/d,
    head dim kept; the GQA ratio is kept, so it must be a multiple of it);
    n_ff / n_ff_exp: dense / expert FFN widths (default: scaled by D/d).
    Extra-block weights are drawn from ``seed``. Returns the output path."""
    import gguf
    from gguf import GGUFValueType as VT

    src_gguf, dst_gguf = Path(src_gguf), Path(dst_gguf)
    reader = read_source(src_gguf, "make_deep")
    fields = reader.fields
    k = lambda s: f"{ARCH}.{s}"  # noqa: E731

    d = int(scalar(fields, k("embedding_length")))
    n_block = int(scalar(fields, k("block_count")))
    n_nextn = int(scalar(fields, k("nextn_predict_layers"), 0))
    if n_nextn != 1:
        raise ValueError(f"make_deep needs exactly one NextN block, {src_gguf.name} has {n_nextn}")
    n_trunk = n_block - n_nextn
    lead = int(scalar(fields, k("leading_dense_block_count"), 0))
    nh = int(scalar(fields, k("attention.head_count")))
    nkv = int(scalar(fields, k("attention.head_count_kv"), nh))
    hd_k = int(scalar(fields, k("attention.key_length"), d // nh))
    hd_v = int(scalar(fields, k("attention.value_length"), hd_k))
    if hd_k != hd_v:
        raise ValueError("make_deep needs key_length == value_length")
    n_rot = int(scalar(fields, k("rope.dimension_count"), hd_k))
    ff = int(scalar(fields, k("feed_forward_length")))
    ffx = int(scalar(fields, k("expert_feed_forward_length")))
    n_sh = int(scalar(fields, k("expert_shared_count"), 0))
    eps = float(scalar(fields, k("attention.layer_norm_rms_epsilon")))

    D = int(n_embd)
    if D < d:
        raise ValueError(f"n_embd {D} is smaller than the source's {d}")
    if n_extra_layers < 0:
        raise ValueError("n_extra_layers must be >= 0")
    if nh % nkv:
        raise ValueError(f"head_count {nh} is not a multiple of head_count_kv {nkv}")
    ratio = nh // nkv
    NH = int(n_head) if n_head is not None else max(nh, (nh * D) // d)
    NH = max(ratio, NH - NH % ratio)
    if NH < nh or NH % ratio:
        raise ValueError(f"n_head must be >= {nh} and a multiple of the GQA ratio {ratio}")
    NKV = NH // ratio
    FF = int(n_ff) if n_ff is not None else (ff * D) // d
    FFX = int(n_ff_exp) if n_ff_exp is not None else (ffx * D) // d
    if FF < ff or FFX < ffx:
        raise ValueError(f"n_ff / n_ff_exp must be >= the source's {ff} / {ffx}")
    NX = int(n_extra_layers)

    dims = {"E": d, "Q": nh * hd_k, "K": nkv * hd_k, "F": ff, "X": ffx, "S": ffx * max(n_sh, 1)}
    new = {"E": D, "Q": NH * hd_k, "K": NKV * hd_k, "F": FF, "X": FFX, "S": FFX * max(n_sh, 1)}
    widening = Widening(dims, new)
    eps_new = eps * d / D

    # ---- group the source tensors -----------------------------------------------------------
    glob: list = []
    blocks: dict[int, list] = {}
    for t in reader.tensors:
        m = _BLK.match(t.name)
        if m:
            blocks.setdefault(int(m.group(1)), []).append((m.group(2), t))
        else:
            glob.append(t)
    if sorted(blocks) != list(range(n_block)):
        raise ValueError(f"expected blocks 0..{n_block - 1}, found {sorted(blocks)}")
    qk_norms = {i: frozenset(s for s, _ in ts) & QK_NORMS for i, ts in blocks.items()}

    def convert(suffix: str, t, blk: int | None) -> np.ndarray:
        """Source tensor t widened (blk: its block, None for a global one)."""
        ne_old = tuple(int(x) for x in t.shape)
        qk_norm = qk_norms[blk] if blk is not None else frozenset()
        return widening.tensor(suffix, tensor_array(t), ne_old, t.name, in_block=blk is not None, qk_norm=qk_norm)

    # ---- metadata ---------------------------------------------------------------------------
    overrides: dict[str, int | float] = {
        k("embedding_length"): D,
        k("block_count"): n_block + NX,
        k("attention.head_count"): NH,
        k("attention.head_count_kv"): NKV,
        k("attention.key_length"): hd_k,
        k("attention.value_length"): hd_v,
        k("rope.dimension_count"): n_rot,
        k("feed_forward_length"): FF,
        k("expert_feed_forward_length"): FFX,
        k("attention.layer_norm_rms_epsilon"): eps_new,
    }
    all_dense = lead >= n_trunk
    if all_dense:
        overrides[k("leading_dense_block_count")] = n_trunk + NX
    default_types = {k("attention.layer_norm_rms_epsilon"): VT.FLOAT32}

    dst_gguf.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(dst_gguf), ARCH)

    def edit(name: str, val: Any) -> Any:
        if name == "general.name":
            val = val + f"-deep-e{D}-x{NX}".encode()
        return overrides.get(name, val)

    written = copy_fields(fields, writer, edit)
    for name, val in overrides.items():
        if name not in written:
            writer.add_key_value(name, val, default_types.get(name, VT.UINT32))
    writer.add_key_value("pymtp.deep.source", src_gguf.name, VT.STRING)
    writer.add_key_value("pymtp.deep.source_embedding_length", d, VT.UINT32)
    writer.add_key_value("pymtp.deep.source_block_count", n_block, VT.UINT32)
    writer.add_key_value("pymtp.deep.seed", int(seed), VT.UINT32)

    # ---- tensors ----------------------------------------------------------------------------
    rng = np.random.default_rng(seed)
    n_new_trunk = n_trunk + NX

    def extra_block(i: int) -> list[tuple[str, np.ndarray]]:
        out = []
        for suffix, t in blocks[n_trunk - 1]:
            a = convert(suffix, t, n_trunk - 1)
            if suffix in _ZERO_IN_EXTRA:
                v = np.zeros(a.shape, dtype=a.dtype)
            elif suffix.endswith(".bias"):
                v = np.zeros(a.shape, dtype=a.dtype)
            elif a.ndim == 1:  # norms
                v = np.ones(a.shape, dtype=a.dtype)
            else:
                v = (rng.standard_normal(a.shape, dtype=np.float32) * 0.02).astype(a.dtype)
            out.append((f"blk.{i}.{suffix}", v))
        return out

    for t in glob:
        suffix = t.name
        writer.add_tensor(t.name, np.ascontiguousarray(convert(suffix, t, None)))
    for b in range(n_block):
        nb = b if b < n_trunk else b + NX
        if b == n_trunk:
            for i in range(n_trunk, n_new_trunk):
                for name, v in extra_block(i):
                    writer.add_tensor(name, np.ascontiguousarray(v))
        for suffix, t in blocks[b]:
            writer.add_tensor(f"blk.{nb}.{suffix}", np.ascontiguousarray(convert(suffix, t, b)))

    finish(writer)
    return dst_gguf


# ---------------------------------------------------------------------------------------------
# cached variants
# ---------------------------------------------------------------------------------------------


#: The benchmark shape: 1024 wide, 4 + 16 trunk blocks; attention and FFN kept narrow so that a
#: plain decode step of the default model's variant costs ~12 ms on 2 cores (191 MB, F16), while
#: the MTP head stays one block: the trunk-to-head cost ratio of a real MTP model.
BENCH_SHAPE: dict[str, Any] = {"n_embd": 1024, "n_extra_layers": 16, "n_head": 4, "n_ff": 1024, "n_ff_exp": 256}


def deep_variant_path(
    src: str | os.PathLike | None = None, *, cache_dir: str | os.PathLike | None = None, **kw: Any
) -> Path:
    """The path of the deep variant of ``src`` (default: the bundled default model),
    generated on first use with ``make_deep(src, ..., **kw)``.

    Cached under ``cache_dir`` (default ``$PYMTP_CACHE_DIR/deep`` or
    ``~/.cache/pymtp/deep``), keyed by the source's size, mtime and first MB and by
    the parameters; written to a temporary file and renamed."""
    if src is None:
        from ..default_model import TINY

        src = TINY
    src = Path(src)
    params = {**BENCH_SHAPE, "seed": 0}
    unknown = set(kw) - set(params)
    if unknown:
        raise TypeError(f"unknown deep-variant parameters: {sorted(unknown)}")
    params.update(kw)
    d = Path(cache_dir) if cache_dir is not None else cache.cache_dir("deep")
    digest = hashlib.sha256(
        json.dumps({"v": DEEP_VERSION, "src": source_key(src), **params}, sort_keys=True).encode()
    ).hexdigest()[:12]
    path = d / f"{src.stem}-deep-e{params['n_embd']}-x{params['n_extra_layers']}-{digest}.gguf"
    return cache.cached_file(path, lambda tmp: make_deep(src, tmp, **params))


def _summary(path: Path) -> str:
    import gguf

    r = gguf.GGUFReader(str(path))
    v = lambda key: r.fields[f"{ARCH}.{key}"].contents()  # noqa: E731
    return (
        f"{path.name}: n_embd {v('embedding_length')}, {v('block_count') - v('nextn_predict_layers')} trunk "
        f"blocks + {v('nextn_predict_layers')} NextN, {v('attention.head_count')} heads "
        f"({v('attention.head_count_kv')} KV) of {v('attention.key_length')}, ffn {v('feed_forward_length')}, "
        f"expert ffn {v('expert_feed_forward_length')}, {path.stat().st_size / 2**20:.1f} MiB"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m pymtp.bench.deep", description="Write a deep, wide glm4moe variant with identical predictions."
    )
    ap.add_argument("--src", default=None, help="source glm4moe GGUF (default: the bundled default model)")
    ap.add_argument("--out", default=None, help="output path (default: the cache, see deep_variant_path)")
    ap.add_argument("--n-embd", type=int, default=BENCH_SHAPE["n_embd"])
    ap.add_argument("--extra-layers", type=int, default=BENCH_SHAPE["n_extra_layers"])
    ap.add_argument("--n-head", type=int, default=BENCH_SHAPE["n_head"])
    ap.add_argument("--n-ff", type=int, default=BENCH_SHAPE["n_ff"])
    ap.add_argument("--n-ff-exp", type=int, default=BENCH_SHAPE["n_ff_exp"])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    kw = dict(
        n_embd=a.n_embd, n_extra_layers=a.extra_layers, n_head=a.n_head, n_ff=a.n_ff, n_ff_exp=a.n_ff_exp, seed=a.seed
    )
    if a.out is None:
        path = deep_variant_path(a.src, **kw)
    else:
        src = a.src
        if src is None:
            from ..default_model import TINY

            src = TINY
        path = make_deep(src, a.out, **kw)
    print(path)
    print(_summary(Path(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
