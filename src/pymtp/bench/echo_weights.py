"""The weights of an echo fixture (pymtp.bench.echo, whose docstring says how they work)
and its GGUF writer: the designed tensors (embeddings, output projection, the head's
``eh_proj`` and ``embed_tokens``), seeded random ones everywhere else, zero output projections.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .byte_vocab import add_byte_bpe_vocab, byte_vocab
from .echo import ARCH, ECHO_VERSION, EchoShape

TOP_LOGIT = 16.0
ALT_GAPS = (1.0, 1.5, 2.0)
PEAK_T = 0.7
_A, _B = math.sqrt(1 - 0.25**2), 0.25  # shares of q_x and q_0 in a hot embedding
_TOKEN_UNUSED = 5
_ZERO_OUT = ("attn_output.weight", "ffn_down.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight")
_DESIGNED = ("token_embd.weight", "output.weight", "nextn.eh_proj.weight", "nextn.embed_tokens.weight")


def _pseudo_words() -> Iterator[str]:
    """' bada', ' bade', ... in GPT-2 byte form: readable padding for the hot vocabulary."""
    syll = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    for n in (2, 3, 4):
        for idx in np.ndindex(*(len(syll),) * n):
            yield "\u0120" + "".join(syll[i] for i in idx)


def _vocab(shape: EchoShape) -> tuple[list[str], list[str], list[int], int, int]:
    tokens, merges, types = byte_vocab(specials=())
    bos, eos = len(tokens), len(tokens) + 1
    tokens += ["<|bos|>", "<|eos|>"]
    types += [3, 3]
    seen = set(tokens)
    words = _pseudo_words()
    while len(tokens) < shape.n_hot:
        w = next(words)
        if w not in seen:
            seen.add(w)
            tokens.append(w)
            types.append(1)
    tokens += [f"[PAD{i}]" for i in range(shape.n_hot, shape.n_vocab)]
    types += [_TOKEN_UNUSED] * (shape.n_vocab - shape.n_hot)
    return tokens, merges, types, bos, eos


def solve_gap(peak: float, n_zero: int, cold: np.ndarray) -> float:
    """g such that at T = PEAK_T the successor's probability is ``peak``."""
    if not 0.3 <= peak <= 0.9999:
        raise ValueError(f"peak must be in [0.3, 0.9999], got {peak}")
    rest = n_zero * math.exp(-TOP_LOGIT / PEAK_T) + float(np.exp((cold - TOP_LOGIT) / PEAK_T).sum())
    p = lambda g: 1 / (1 + sum(math.exp(-g * c / PEAK_T) for c in ALT_GAPS) + rest)  # noqa: E731
    lo, hi = 0.0, TOP_LOGIT / max(ALT_GAPS)
    if p(hi) < peak:
        raise ValueError(f"peak {peak} is out of reach with TOP_LOGIT {TOP_LOGIT}")
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p(mid) < peak else (lo, mid)
    return hi


def _orthonormal_rows(rng: np.random.Generator, n: int, d: int, block: int = 64) -> np.ndarray:
    """The first n rows of a random d x d orthogonal matrix, B1 P B2 (B block-diagonal random
    rotations, P a permutation): dense rows in O(n d block) work, where a QR costs O(d^3)."""
    if d % block:
        block = d
    rot = lambda: [np.linalg.qr(rng.standard_normal((block, block)))[0] for _ in range(d // block)]  # noqa: E731
    b1, b2, perm = rot(), rot(), rng.permutation(d)
    x = np.zeros((n, d))
    for j in range(0, n, block):
        m = min(block, n - j)
        x[j : j + m, j : j + block] = b1[j // block][:m]
    x = x[:, perm]
    for j in range(d // block):
        s = slice(j * block, (j + 1) * block)
        x[:, s] = x[:, s] @ b2[j]
    return x


def _agreeing(rng: np.random.Generator, n: int, agree: float, tries: int = 64) -> np.ndarray:
    """An exact share ``agree`` of n cycle positions that looks like independent draws: of
    ``tries`` random choices, the one where an agreeing position is followed by 1, 2 and 3 more
    nearest ``agree``, ``agree^2``, ``agree^3`` of the time (on a short cycle one draw can be
    off by several points, and drafts of 2-3 tokens would measure that, not ``agree``)."""
    best, best_err = np.zeros(n, dtype=bool), math.inf
    for _ in range(tries):
        a = np.zeros(n, dtype=bool)
        a[rng.choice(n, size=round(agree * n), replace=False)] = True
        err, run = 0.0, a
        for lag in (1, 2, 3):
            run = run & np.roll(a, -lag)
            err += abs(run.sum() / max(1, a.sum()) - agree ** (lag + 1) / max(agree, 1e-9))
        if err < best_err:
            best, best_err = a, err
    return best


def _design(shape: EchoShape, agree: float, seed: int, peak: float) -> dict[str, Any]:
    """The designed tensors (float32, numpy layout) and the maps."""
    rng = np.random.default_rng([seed, ECHO_VERSION, 0xEC0])
    d, v, n_hot = shape.n_embd, shape.n_vocab, shape.n_hot
    tokens, merges, types, bos, eos = _vocab(shape)
    cycle = rng.permutation(np.array([t for t in range(n_hot) if t not in (bos, eos)]))
    n = len(cycle)
    offsets = np.array([1] + sorted(rng.choice(np.arange(2, n), size=len(ALT_GAPS), replace=False).tolist()))
    # head: agree on an exact share of the cycle, elsewhere read a token z whose predictions share nothing
    agrees = _agreeing(rng, n, agree)
    bad = {int(a - b) % n for a in offsets for b in offsets}
    shifts = np.array([s for s in range(1, n) if s not in bad])
    z_pos = np.where(agrees, np.arange(n), (np.arange(n) + rng.choice(shifts, size=n)) % n)

    # inputs: every hot token (the cycle's, then bos and eos, which go on at the cycle's first token)
    inputs = np.concatenate([cycle, [bos, eos]])
    in_pos = np.concatenate([np.arange(n), [n - 1, n - 1]])
    q = _orthonormal_rows(rng, n_hot + 1, d)  # q[0]: the shared direction
    emb = np.empty((v, d), dtype=np.float32)
    emb[:n_hot] = math.sqrt(d) * (_A * q[1:] + _B * q[0])
    emb[n_hot:] = rng.standard_normal((v - n_hot, d), dtype=np.float32)
    cold = np.setdiff1d(np.arange(v), cycle)  # control and padding tokens
    kappa = -TOP_LOGIT * rng.uniform(1.0, 1.5, size=len(cold))
    g = solve_gap(peak, n - 1 - len(ALT_GAPS), kappa)
    logits = [TOP_LOGIT] + [TOP_LOGIT - g * c for c in ALT_GAPS]
    out = np.zeros((v, d), dtype=np.float32)
    dirs = q[1 + inputs] / (_A * math.sqrt(d))
    for off, lg in zip(offsets, logits):
        np.add.at(out, cycle[(in_pos + off) % n], (lg * dirs).astype(np.float32))
    out[cold] = (kappa[:, None] * q[0][None, :] / (_B * math.sqrt(d))).astype(np.float32)
    head_emb = emb.copy()
    head_emb[cycle] = emb[cycle[z_pos]]
    nxt = np.full(v, -1, dtype=np.int64)
    nxt[inputs] = cycle[(in_pos + 1) % n]
    head_next = nxt.copy()
    head_next[cycle] = cycle[(z_pos + 1) % n]
    eh = np.zeros((d, 2 * d), dtype=np.float32)
    eh[:, :d] = np.eye(d, dtype=np.float32)
    return {
        "token_embd.weight": emb,
        "output.weight": out,
        "nextn.eh_proj.weight": eh,
        "nextn.embed_tokens.weight": head_emb,
        "next": nxt,
        "head_next": head_next,
        "gap": g,
        "vocab": (tokens, merges, types, bos, eos),
    }


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------


def _random_f16(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    """Random F16 values of magnitude in [scale/8, 2 scale) and random sign, made from random
    bits (about 10x faster than normal draws: a 1.5B model's trunk takes seconds)."""
    e = int(np.clip(11 + round(math.log2(2 * scale)), 1, 27))
    bits = rng.integers(0, 1 << 16, size=math.prod(shape), dtype=np.uint16)
    bits = (bits & np.uint16(0x83FF)) | ((((bits >> np.uint16(10)) & np.uint16(3)) + np.uint16(e)) << np.uint16(10))
    return bits.view(np.float16).reshape(shape)


def _tensor(name: str, shape: tuple[int, ...], designed: dict, rng: np.random.Generator, dtype) -> np.ndarray:
    suffix = name.split(".", 2)[-1] if name.startswith("blk.") else name
    if len(shape) == 1:
        return (np.zeros if suffix.endswith(".bias") else np.ones)(shape, dtype=np.float32)
    if suffix in _DESIGNED:
        return designed[suffix].astype(dtype)
    if suffix in _ZERO_OUT:
        return np.zeros(shape, dtype=dtype)
    return _random_f16(rng, shape, 1.0 / math.sqrt(shape[-1])).astype(dtype)


def write_gguf(path: Path, shape: EchoShape, agree: float, seed: int, peak: float, wtype: str) -> None:
    import gguf
    from gguf import GGUFValueType as VT

    des = _design(shape, agree, seed, peak)
    tokens, merges, types, bos, eos = des["vocab"]
    dtype = np.float16 if wtype == "F16" else np.float32
    wr = gguf.GGUFWriter(str(path), ARCH)
    wr.add_string("general.name", f"pymtp-echo-a{round(agree * 100)}-e{shape.n_embd}-l{shape.n_layer}-s{seed}")
    wr.add_uint32("general.file_type", 1 if wtype == "F16" else 0)
    wr.add_uint32("general.quantization_version", 2)
    k = lambda s: f"{ARCH}.{s}"  # noqa: E731
    for key, val in (
        ("context_length", shape.n_ctx),
        ("embedding_length", shape.n_embd),
        ("block_count", shape.n_layer + 1),
        ("nextn_predict_layers", 1),
        ("feed_forward_length", shape.n_ff),
        ("attention.head_count", shape.n_head),
        ("attention.head_count_kv", shape.n_head_kv),
        ("attention.key_length", shape.head_dim),
        ("attention.value_length", shape.head_dim),
        ("rope.dimension_count", shape.head_dim // 2),
        ("expert_count", shape.n_expert),
        ("expert_used_count", shape.n_expert_used),
        ("expert_feed_forward_length", shape.n_ff_exp),
        ("expert_shared_count", 1),
        ("expert_gating_func", 2),
        ("leading_dense_block_count", shape.n_layer),
    ):
        wr.add_uint32(k(key), val)
    wr.add_float32(k("attention.layer_norm_rms_epsilon"), 1e-6)
    wr.add_float32(k("rope.freq_base"), 10000.0)
    wr.add_bool(k("expert_weights_norm"), True)
    wr.add_float32(k("expert_weights_scale"), 1.0)
    add_byte_bpe_vocab(wr, tokens, merges, types, bos=bos, eos=eos, add_bos=True)
    wr.add_float32("pymtp.echo.agree", float(agree))
    wr.add_float32("pymtp.echo.peak", float(peak))
    wr.add_float32("pymtp.echo.gap", float(des["gap"]))
    wr.add_uint32("pymtp.echo.seed", int(seed))
    wr.add_uint32("pymtp.echo.version", ECHO_VERSION)
    wr.add_key_value("pymtp.echo.next", des["next"].tolist(), VT.ARRAY, VT.INT32)
    wr.add_key_value("pymtp.echo.head_next", des["head_next"].tolist(), VT.ARRAY, VT.INT32)

    specs = shape.tensors()
    for name, s in specs:
        dt = np.float32 if len(s) == 1 else dtype
        wr.add_tensor_info(name, s, np.dtype(dt), math.prod(s) * np.dtype(dt).itemsize)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_ti_data_to_file()
    rng = np.random.default_rng([seed, ECHO_VERSION, 0xB10C])
    for name, s in specs:  # one random tensor in memory at a time
        wr.write_tensor_data(_tensor(name, s, des, rng, dtype))
    wr.close()
