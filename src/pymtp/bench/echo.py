"""Echo fixtures: glm4moe GGUFs whose greedy text is known in advance and whose MTP head agrees
with the trunk's next token a chosen fraction ``agree`` of the time, at any size and weight type.

Speed measured on small models says little about real 7B-30B ones (bandwidth bound, heads that
agree 70-90 %), and none can be downloaded here. An echo fixture has the shape, and so the cost,
of a real model (seeded random attention and FFN weights, a full-width output projection, one
MoE NextN block), while its predictions are designed::

    from pymtp.bench.echo import echo_path, EchoMaps
    path = echo_path(0.8, params=1.5e9, type="Q4_K_M")     # cached; a few minutes the first time
    maps = EchoMaps.read(path)                              # what the trunk and the head predict
    python -m pymtp.bench.echo --agree 0.8 --params 1.5e9 --type Q4_K_M --out x.gguf
    pymtp bench --model echo-80-1.5b                        # names: see parse_name

How (llama.cpp 0c1e57098bba, src/models/glm4-moe.cpp):

* Every block adds exactly zero to the residual stream (``attn_output`` and the FFN / expert
  down projections are zero; deep.py's extra blocks do the same) while its other matrices are
  random: the trunk's hidden row at a token x is rmsnorm(E[x]) and costs what the shape costs.
* Hot tokens (ids below n_hot = min(n_vocab, n_embd - 1, 4096): the tokenizer's 302 byte and
  merge tokens, the two control tokens, then pseudo-words) get orthonormal embedding directions
  q_x plus a shared direction q_0: E[x] = sqrt(D) (a q_x + b q_0). An output row built from the
  q_x then scores each hot input exactly (no cross-talk, unlike nearly orthogonal random
  rows): at x the successor pi(x) scores 16, three alternates score g, 1.5 g and 2 g below
  it, every other hot token 0, and the control and padding tokens -16 to -24 (their rows point
  against q_0; echo_weights.py builds all this). g is chosen so that at temperature 0.7 the successor has
  probability ``peak`` (0.9: peaked, not one-hot; at T = 1 about 0.78).
* pi is one cycle through the hot normal tokens, so greedy text from any prompt walks it; the
  alternates lie further along it (fixed offsets). The ids above n_hot are ``[PAD<id>]`` tokens
  of type UNUSED: the text never reaches them, so it stays inside the trimmed draft vocabulary
  (SpecConfig.draft_vocab, default 4096: the most frequent tokens, ties by lower id).
* The head (``nextn.eh_proj`` = [I, 0]: only the token's embedding reaches it) reads its token
  through its own ``nextn.embed_tokens``: equal to the trunk's on a random exact ``agree`` share
  of the cycle, and elsewhere the embedding of another token z whose successor and alternates
  share none of x's. So the head's distribution equals the trunk's where it agrees and overlaps
  it nowhere else: greedy acceptance at draft length 1 is ``agree`` over the cycle, sampled
  acceptance near it, and since the head's next draft depends only on the token it drafted, each
  later draft position is accepted with probability ``agree`` again (cumulative agree^i).

``EchoMaps`` (read back from the GGUF's ``pymtp.echo.*`` keys) holds pi, the head's
predictions, and a simulation of greedy speculation's counters.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import cache

__all__ = ["ECHO_VERSION", "EchoMaps", "EchoShape", "echo_path", "make_echo", "parse_name", "shape_for_params"]

#: Bump when the generated files change (the cache key includes it).
ECHO_VERSION = 1
ARCH = "glm4moe"
#: Size of echo-NN without a size: 0.1B parameters (F16, ~200 MB, a few seconds to write).
DEFAULT_PARAMS = 1e8
#: Named sizes from this many parameters on default to Q4_K_M (smaller ones to F16).
QUANTIZED_FROM = 1e9
HOT_MAX = 4096  # within the default trimmed draft vocabulary
DEFAULT_PEAK = 0.9


# ---------------------------------------------------------------------------------------------
# shape
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EchoShape:
    """Sizes of an echo fixture: n_layer dense trunk blocks plus one MoE NextN block."""

    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_expert: int = 8
    n_expert_used: int = 2
    n_ff_exp: int = 256
    n_ctx: int = 32768

    def __post_init__(self) -> None:
        if self.n_embd < 320 or self.n_vocab < 320:
            raise ValueError(
                "n_embd and n_vocab must be >= 320: every token a prompt can hold (the 304 of the "
                "byte-level vocabulary) needs its own embedding direction"
            )
        if self.n_layer < 1 or min(self.n_head, self.n_head_kv, self.head_dim, self.n_ff, self.n_ff_exp) < 1:
            raise ValueError(f"every size must be positive: {self}")
        if self.n_head % self.n_head_kv:
            raise ValueError(f"n_head {self.n_head} is not a multiple of n_head_kv {self.n_head_kv}")
        if not 1 <= self.n_expert_used <= self.n_expert:
            raise ValueError("need 1 <= n_expert_used <= n_expert")

    @property
    def n_hot(self) -> int:
        """Token ids below this are the ones text can hold (see the module's docstring)."""
        return min(self.n_vocab, self.n_embd - 1, HOT_MAX)

    def tensors(self) -> list[tuple[str, tuple[int, ...]]]:
        """(name, numpy shape) of every tensor, in file order."""
        d, v, q, kv = self.n_embd, self.n_vocab, self.n_head * self.head_dim, self.n_head_kv * self.head_dim
        out = [("token_embd.weight", (v, d)), ("output_norm.weight", (d,)), ("output.weight", (v, d))]
        for i in range(self.n_layer + 1):
            b = f"blk.{i}"
            out += [
                (f"{b}.attn_norm.weight", (d,)),
                (f"{b}.attn_q.weight", (q, d)),
                (f"{b}.attn_k.weight", (kv, d)),
                (f"{b}.attn_v.weight", (kv, d)),
                (f"{b}.attn_q.bias", (q,)),
                (f"{b}.attn_k.bias", (kv,)),
                (f"{b}.attn_v.bias", (kv,)),
                (f"{b}.attn_output.weight", (d, q)),
                (f"{b}.post_attention_norm.weight", (d,)),
            ]
            if i < self.n_layer:
                f = self.n_ff
                out += [
                    (f"{b}.ffn_gate.weight", (f, d)),
                    (f"{b}.ffn_up.weight", (f, d)),
                    (f"{b}.ffn_down.weight", (d, f)),
                ]
                continue
            e, f = self.n_expert, self.n_ff_exp
            out += [
                (f"{b}.ffn_gate_inp.weight", (e, d)),
                (f"{b}.exp_probs_b.bias", (e,)),
                (f"{b}.ffn_gate_exps.weight", (e, f, d)),
                (f"{b}.ffn_up_exps.weight", (e, f, d)),
                (f"{b}.ffn_down_exps.weight", (e, d, f)),
                (f"{b}.ffn_gate_shexp.weight", (f, d)),
                (f"{b}.ffn_up_shexp.weight", (f, d)),
                (f"{b}.ffn_down_shexp.weight", (d, f)),
                (f"{b}.nextn.eh_proj.weight", (d, 2 * d)),
                (f"{b}.nextn.enorm.weight", (d,)),
                (f"{b}.nextn.hnorm.weight", (d,)),
                (f"{b}.nextn.shared_head_norm.weight", (d,)),
                (f"{b}.nextn.embed_tokens.weight", (v, d)),
            ]
        return out

    @property
    def n_params(self) -> int:
        return sum(math.prod(s) for _, s in self.tensors())


def shape_for_params(params: float, *, n_vocab: int | None = None) -> EchoShape:
    """A llama-like shape of about ``params`` parameters (every tensor counted, the head's
    included): width ~ (6.5 params)^(1/3) in steps of 256 (1.5e9 -> 2048, 7e9 -> 3584), heads of
    128 (64 below 1024 wide), about 4 query heads per KV head, FFN 2.75x, a head of 8 experts (2
    used, 1 shared) of a quarter of the FFN, a vocabulary whose output projection holds ~5 % of
    the parameters (a power of 2: 1.5e9 -> 32768, as in real 7B-30B models), and as many trunk
    blocks as fill the rest. Widths and FFNs are multiples of 256, as K-quants need."""
    params = float(params)
    if not params > 0:
        raise ValueError(f"params must be positive, got {params}")
    d = 256 * max(2, round((6.5 * params) ** (1 / 3) / 256))
    hd = 128 if d >= 1024 else 64
    nh = d // hd
    nkv = max(1, nh // 4)
    while nh % nkv:
        nkv -= 1
    ff = 256 * max(1, round(2.75 * d / 256))
    ffx = 256 * max(1, round(ff / 4 / 256))
    if n_vocab is None:
        n_vocab = max(512, 2 ** round(math.log2(max(1.0, 0.05 * params / d))))
    base = EchoShape(
        n_embd=d, n_layer=1, n_head=nh, n_head_kv=nkv, head_dim=hd, n_ff=ff, n_vocab=int(n_vocab), n_ff_exp=ffx
    )
    per_block = EchoShape(**{**asdict(base), "n_layer": 2}).n_params - base.n_params
    n_layer = max(1, round((params - base.n_params) / per_block) + 1)
    return EchoShape(**{**asdict(base), "n_layer": n_layer})


#: The tests' shape: ~6M parameters, written in well under a second.
SMALL_SHAPE = EchoShape(
    n_embd=384,
    n_layer=2,
    n_head=6,
    n_head_kv=2,
    head_dim=64,
    n_ff=768,
    n_vocab=512,
    n_expert=4,
    n_ff_exp=256,
    n_ctx=4096,
)


# ---------------------------------------------------------------------------------------------
# what the model predicts
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EchoMaps:
    """next[x]: the trunk's greedy token after x; head_next[x]: the MTP head's draft after x
    (-1: a padding token, which text never holds); agree: the fraction the fixture was made for."""

    next: np.ndarray
    head_next: np.ndarray
    agree: float

    @classmethod
    def read(cls, path: str | os.PathLike) -> EchoMaps:
        import gguf

        f = gguf.GGUFReader(str(path)).fields
        if "pymtp.echo.next" not in f:
            raise ValueError(f"{path} is not an echo fixture (no pymtp.echo.next key)")
        arr = lambda k: np.asarray(f[k].contents(), dtype=np.int64)  # noqa: E731
        return cls(arr("pymtp.echo.next"), arr("pymtp.echo.head_next"), float(f["pymtp.echo.agree"].contents()))

    @property
    def cycle_agreement(self) -> float:
        """The fraction of the cycle's tokens where the head predicts the trunk's next token."""
        on = self.next >= 0
        return float(np.mean(self.next[on] == self.head_next[on]))

    def greedy(self, last: int, n: int) -> list[int]:
        """The n tokens greedy decoding writes after ``last``."""
        out = []
        for _ in range(n):
            last = int(self.next[last])
            out.append(last)
        return out

    def simulate(self, last: int, n_draft: int, max_tokens: int) -> dict[str, Any]:
        """The counters of greedy speculation at a fixed draft length after a prompt ending in
        ``last``, by pymtp's step rule (every step, the first included, drafts min(n_draft,
        tokens left - 1) tokens, the head recursing on its own draft), counted as SpecStats does."""
        text: list[int] = []
        drafted_at: list[int] = []
        accepted_at: list[int] = []
        n_steps = 0
        while len(text) < max_tokens:
            x = text[-1] if text else last
            k, n_acc, d = min(n_draft, max_tokens - len(text) - 1), 0, x
            while n_acc < k and self.head_next[d] == self.next[d]:
                n_acc += 1
                d = int(self.head_next[d])
            for counts, n in ((drafted_at, k), (accepted_at, n_acc)):
                counts.extend([0] * (n - len(counts)))
                for i in range(n):
                    counts[i] += 1
            text += self.greedy(x, n_acc + 1)
            n_steps += 1
        return {
            "tokens": text,
            "n_steps": n_steps,
            "n_drafted": sum(drafted_at),
            "n_accepted": sum(accepted_at),
            "drafted_at": drafted_at,
            "accepted_at": accepted_at,
        }


# ---------------------------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------------------------


def make_echo(
    path: str | os.PathLike,
    agree: float,
    *,
    shape: EchoShape | None = None,
    params: float | None = None,
    type: str = "F16",
    seed: int = 0,
    peak: float = DEFAULT_PEAK,
    mtp_type: str | None = None,
) -> Path:
    """Write an echo fixture to ``path`` and return it. The size is ``shape``, or
    ``shape_for_params(params)``, or SMALL_SHAPE. type: F32 / F16 written directly, any other
    llama.cpp file type (Q4_K_M, Q8_0, ...) written in F16 and quantized with pymtp.quant, the
    NextN block as ``mtp_type`` (None: like the rest, as in a downloaded quantized model)."""
    from .. import quant

    if shape is None:
        shape = shape_for_params(params) if params is not None else SMALL_SHAPE
    elif params is not None:
        raise ValueError("pass shape or params, not both")
    if not 0.0 <= agree <= 1.0:
        raise ValueError(f"agree must be in [0, 1], got {agree}")
    path, wtype = Path(path), str(type).upper()
    if wtype not in quant.FTYPES:
        raise ValueError(f"type must be one of {', '.join(quant.FTYPES)}, got {type!r}")
    from .echo_weights import solve_gap, write_gguf

    solve_gap(peak, 0, np.zeros(0))  # checks peak
    path.parent.mkdir(parents=True, exist_ok=True)
    if wtype in ("F16", "F32"):
        write_gguf(path, shape, agree, seed, peak, wtype)
        return path
    f16 = path.with_name(f".{path.name}.f16.tmp")
    try:
        write_gguf(f16, shape, agree, seed, peak, "F16")
        quant.quantize(f16, path, type=wtype, mtp_type=mtp_type)
    finally:
        f16.unlink(missing_ok=True)
    return path


def _size_label(params: float) -> str:
    return f"{params / 1e9:.2g}b" if params >= 1e9 else f"{params / 1e6:.0f}m"


def echo_path(
    agree: float,
    *,
    params: float | None = None,
    shape: EchoShape | None = None,
    type: str | None = None,
    seed: int = 0,
    peak: float = DEFAULT_PEAK,
    mtp_type: str | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """The path of an echo fixture, made on first use (make_echo) under ``cache_dir`` (default
    ``$PYMTP_CACHE_DIR/echo``), keyed by every parameter. Without shape or params: DEFAULT_PARAMS;
    type None: Q4_K_M from QUANTIZED_FROM parameters, else F16."""
    if shape is None:
        shape = shape_for_params(params if params is not None else DEFAULT_PARAMS)
    elif params is not None:
        raise ValueError("pass shape or params, not both")
    if type is None:
        type = "Q4_K_M" if shape.n_params >= QUANTIZED_FROM else "F16"
    key = {
        "v": ECHO_VERSION,
        "agree": float(agree),
        "shape": asdict(shape),
        "type": str(type).upper(),
        "seed": int(seed),
        "peak": float(peak),
        "mtp_type": mtp_type,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    d = Path(cache_dir) if cache_dir is not None else cache.cache_dir("echo")
    name = f"echo-a{round(agree * 100)}-{_size_label(shape.n_params)}-{str(type).lower()}-{digest}.gguf"
    return cache.cached_file(
        d / name, lambda tmp: make_echo(tmp, agree, shape=shape, type=type, seed=seed, peak=peak, mtp_type=mtp_type)
    )


_NAME = re.compile(r"^echo-(\d{1,3})(?:-(\d+(?:\.\d+)?)([kmb]))?(?:-([a-z0-9_]+))?$", re.IGNORECASE)
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9}


def parse_name(spec: str) -> dict[str, Any] | None:
    """``echo-AGREE[-SIZE][-TYPE]`` (AGREE in percent; SIZE like 100m or 1.5b, default 0.1B;
    TYPE f16, q4_k_m, q8_0, ..., default Q4_K_M from 1B on, else F16) as echo_path's keyword
    arguments; None when spec is not such a name. echo-100, echo-70, echo-80-1.5b, echo-70-q8_0."""
    m = _NAME.match(spec)
    if not m:
        return None
    agree = int(m.group(1))
    if agree > 100:
        raise ValueError(f"{spec}: the agreement is a percentage (0-100)")
    out: dict[str, Any] = {"agree": agree / 100}
    if m.group(2):
        out["params"] = float(m.group(2)) * _SCALE[m.group(3).lower()]
    if m.group(4):
        from ..quant import FTYPES

        t = m.group(4).upper()
        if t not in FTYPES:
            raise ValueError(f"{spec}: unknown weight type {m.group(4)!r}; known: {', '.join(FTYPES)}")
        out["type"] = t
    return out


def _summary(path: Path, shape: EchoShape, seconds: float) -> str:
    maps = EchoMaps.read(path)
    return (
        f"{path.name}: {shape.n_params / 1e9:.3f}B parameters (n_embd {shape.n_embd}, {shape.n_layer} trunk "
        f"blocks + 1 NextN, {shape.n_head} heads ({shape.n_head_kv} KV) of {shape.head_dim}, ffn {shape.n_ff}, "
        f"{shape.n_expert} experts of {shape.n_ff_exp}, vocab {shape.n_vocab} ({shape.n_hot} hot)), "
        f"head agrees on {maps.cycle_agreement:.3f} of the cycle, {path.stat().st_size / 2**20:.1f} MiB, "
        f"made in {seconds:.1f} s"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m pymtp.bench.echo",
        description="Write an echo fixture: known greedy text, a head that agrees a chosen fraction of the time.",
    )
    ap.add_argument("--agree", type=float, required=True, help="fraction of tokens where the head agrees (0-1)")
    ap.add_argument("--params", type=float, default=DEFAULT_PARAMS, help="parameter count (default 1e8)")
    ap.add_argument("--n-vocab", type=int, default=None, help="vocabulary (default: ~5%% of params in the output)")
    ap.add_argument("--type", default=None, help="F16, F32, Q4_K_M, Q8_0, ... (default: Q4_K_M from 1e9, else F16)")
    ap.add_argument(
        "--mtp-type", default=None, help="the NextN block's tensor type when quantizing (default: like the rest)"
    )
    ap.add_argument("--peak", type=float, default=DEFAULT_PEAK, help="successor probability at T=0.7")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="output path (default: the cache, see echo_path)")
    a = ap.parse_args(argv)
    shape = shape_for_params(a.params, n_vocab=a.n_vocab)
    t0 = time.perf_counter()
    if a.out is None:
        path = echo_path(a.agree, shape=shape, type=a.type, seed=a.seed, peak=a.peak, mtp_type=a.mtp_type)
    else:
        wtype = a.type or ("Q4_K_M" if shape.n_params >= QUANTIZED_FROM else "F16")
        path = make_echo(a.out, a.agree, shape=shape, type=wtype, seed=a.seed, peak=a.peak, mtp_type=a.mtp_type)
    print(path)
    print(_summary(Path(path), shape, time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
