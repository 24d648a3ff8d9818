"""A padded-vocabulary variant of a glm4moe GGUF: the vocabulary of a real MTP model
(151,552 for GLM-4.5, 248,320 for Qwen3.5/3.6) on a small trunk, for benchmarks.

Sampling, verification and the output projections of the trunk and of the MTP head all
cost in proportion to the vocabulary. ``make_padded`` appends tokens to the source's
vocabulary until it has ``n_vocab``: every tensor with a vocabulary axis (``token_embd``,
``output``, the NextN ``embed_tokens`` / ``shared_head_head``) gets the extra rows, so the
projections cost what a real model's of that vocabulary do, and the tokenizer arrays
(tokens, token types, scores) get entries ``[PAD<id>]`` of type UNUSED (merges untouched),
so no prompt ever contains them::

    from pymtp.bench.vocab import padded_vocab_path
    path = padded_vocab_path(248_320)            # the default model, padded; built once, cached
    python -m pymtp.bench.vocab --n-vocab 151552 [--src model.gguf]
    pymtp bench --model default-v248k

What the padded rows hold, so that they stay out of the top of the distribution. Logits are
linear in an output row, so a row ``w = -s * mean(rows R)`` scores ``-s * mean(logits of R)``
at every position. ``calibrate`` decodes a short built-in text (not a bench prompt) with
the source model and takes for R the 8 real tokens whose lowest logit over that text is
highest; when their mean logit stays above 1 everywhere there, padded row j gets
``-s_j * mean(R)`` with s_j spread over [3, 5] (distinct values, no exact ties), else
(random-weight fixtures, whose rows have no sign) zeros. An input embedding that is not
also the output (``output`` present) gets zeros for the padding. The real tokens' logits
are the same dot products as before, so greedy output is unchanged while a padded logit
stays below the top one (README, "Performance", measures the padded mass).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .. import cache
from .gguf_copy import ARCH, copy_fields, finish, read_source, source_key, tensor_array

__all__ = ["VOCAB_VERSION", "VOCABS", "calibrate", "make_padded", "padded_vocab_path"]

#: Bump when the generated files change (the cache key includes it).
VOCAB_VERSION = 1
#: The real vocabularies the bench names: GLM-4.5's and Qwen3.5/3.6's.
VOCABS = {"v151k": 151_552, "v248k": 248_320}
TOKEN_TYPE_UNUSED = 5
_PAD_SCALE = (3.0, 5.0)
_N_ROWS = 8
_MARGIN = 1.0

_CALIBRATION_TEXT = (
    "The quick brown fox jumps over the lazy dog. Speculative decoding drafts a few tokens with a "
    "small head and verifies them with the full model in one batch; the accepted prefix is kept.\n\n"
    "def merge(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n"
    "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n        else:\n"
    "            out.append(b[j])\n            j += 1\n    return out + a[i:] + b[j:]\n\n"
    "Numbers such as 3.14159, 2024 and 1e-6 appear in text, as do names like Paris and Ada Lovelace.\n"
)
# Tensors with a vocabulary axis (ggml ne[1]); those that score tokens get the calibrated rows.
_INPUT_ONLY = {"token_embd.weight", "nextn.embed_tokens.weight"}
_OUTPUT = {"output.weight", "nextn.shared_head_head.weight"}


def calibrate(src: str | os.PathLike, text: str = _CALIBRATION_TEXT) -> tuple[np.ndarray, dict[str, Any]]:
    """The real tokens R whose combination scores low everywhere on ``text`` (see the module's
    docstring): (ids of R, or an empty array for zeros; a summary of the logits seen)."""
    from ..model import Model, TargetContext

    model = Model(src, mtp=False)
    try:
        toks = model.tokenize(text)
        with TargetContext(model, n_ctx=len(toks) + 1, n_batch=len(toks)) as t:
            t.decode(toks, 0)
            logits = np.array(t.logits(), dtype=np.float64)[1:]  # the first row sees only BOS
    finally:
        model.close()
    lowest = logits.min(axis=0)
    rows = np.argsort(-lowest, kind="stable")[:_N_ROWS]
    mean_r = logits[:, rows].mean(axis=1)
    info = {
        "n_positions": int(logits.shape[0]),
        "rows": [int(r) for r in rows],
        "min_mean_logit_of_rows": float(mean_r.min()),
        "median_top_logit": float(np.median(logits.max(axis=1))),
    }
    if mean_r.min() <= _MARGIN:
        return np.zeros(0, dtype=np.int64), info
    return rows.astype(np.int64), info


def _pad_rows(a: np.ndarray, n_new: int, base: np.ndarray | None, seed: int) -> np.ndarray:
    """a (n_old, d) with n_new rows appended: ``-s_j * base`` (s_j spread over _PAD_SCALE), or zeros."""
    out = np.zeros((a.shape[0] + n_new, a.shape[1]), dtype=a.dtype)
    out[: a.shape[0]] = a
    if base is not None and n_new:
        s = np.random.default_rng(seed).uniform(*_PAD_SCALE, size=n_new).astype(np.float32)
        chunk = 16384
        for i in range(0, n_new, chunk):
            out[a.shape[0] + i : a.shape[0] + i + chunk] = (-s[i : i + chunk, None] * base[None, :]).astype(a.dtype)
    return out


def make_padded(
    src_gguf: str | os.PathLike, dst_gguf: str | os.PathLike, n_vocab: int, *, calibrated: bool = True, seed: int = 0
) -> Path:
    """Write ``src_gguf`` (glm4moe) with its vocabulary padded to ``n_vocab`` tokens to
    ``dst_gguf`` (see the module's docstring). calibrated=False: zero rows. Returns dst."""
    import gguf
    from gguf import GGUFValueType as VT

    src_gguf, dst_gguf = Path(src_gguf), Path(dst_gguf)
    reader = read_source(src_gguf, "make_padded")
    fields = reader.fields
    tokens = fields["tokenizer.ggml.tokens"]
    n_old = len(tokens.data)
    n_vocab = int(n_vocab)
    if n_vocab < n_old:
        raise ValueError(f"n_vocab {n_vocab} is smaller than the source's {n_old}")
    n_new = n_vocab - n_old

    rows, info = calibrate(src_gguf) if calibrated and n_new else (np.zeros(0, dtype=np.int64), {})
    tensors = {t.name: t for t in reader.tensors}
    scorer = tensors.get("output.weight") or tensors["token_embd.weight"]
    base = None
    if rows.size:
        base = tensor_array(scorer)[rows].astype(np.float32).mean(axis=0)

    dst_gguf.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(dst_gguf), ARCH)

    def edit(name: str, val: Any) -> Any:
        if name == "general.name":
            return val + f"-v{n_vocab}".encode()
        if name == f"{ARCH}.vocab_size":
            return n_vocab
        if name == "tokenizer.ggml.tokens":
            return list(val) + [f"[PAD{i}]".encode() for i in range(n_old, n_vocab)]
        if name == "tokenizer.ggml.token_type":
            return np.concatenate(
                [np.asarray(val, dtype=np.int32), np.full(n_new, TOKEN_TYPE_UNUSED, np.int32)]
            ).tolist()
        if name == "tokenizer.ggml.scores":
            return np.concatenate([np.asarray(val, dtype=np.float32), np.full(n_new, -1e4, np.float32)]).tolist()
        if (
            isinstance(val, list)
            and len(val) == n_old
            and name.startswith("tokenizer.")
            and name != "tokenizer.ggml.merges"
        ):
            raise ValueError(f"make_padded does not know how to pad {name}")
        return val

    copy_fields(fields, writer, edit)
    if f"{ARCH}.vocab_size" not in fields:
        writer.add_key_value(f"{ARCH}.vocab_size", n_vocab, VT.UINT32)
    writer.add_key_value("pymtp.vocab.source", src_gguf.name, VT.STRING)
    writer.add_key_value("pymtp.vocab.source_n_vocab", n_old, VT.UINT32)
    writer.add_key_value("pymtp.vocab.pad_rows", "neg-mean" if base is not None else "zeros", VT.STRING)
    if base is not None:
        writer.add_key_value("pymtp.vocab.calibration", json.dumps(info), VT.STRING)

    tied = "output.weight" not in tensors
    for t in reader.tensors:
        ne = tuple(int(x) for x in t.shape)
        suffix = t.name.split(".", 2)[-1] if t.name.startswith("blk.") else t.name
        if len(ne) == 2 and ne[1] == n_old and n_new:
            if suffix not in _INPUT_ONLY | _OUTPUT:
                raise ValueError(f"{t.name} has a vocabulary axis that make_padded does not know")
            scores = suffix in _OUTPUT or (tied and suffix == "token_embd.weight")
            writer.add_tensor(t.name, _pad_rows(tensor_array(t), n_new, base if scores else None, seed))
        else:  # unchanged bytes, any type
            writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    finish(writer)
    return dst_gguf


def padded_vocab_path(
    n_vocab: int,
    src: str | os.PathLike | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    calibrated: bool = True,
) -> Path:
    """The path of ``src`` (default: the default model, assembled on first use) padded to
    ``n_vocab`` tokens, written on first use under ``cache_dir`` (default
    ``$PYMTP_CACHE_DIR/vocab``), keyed by the source's size, mtime and first MB."""
    if src is None:
        from ..default_model import resolve

        src = resolve("default")
    src = Path(src)
    d = Path(cache_dir) if cache_dir is not None else cache.cache_dir("vocab")
    digest = hashlib.sha256(
        json.dumps(
            {"v": VOCAB_VERSION, "src": source_key(src), "n": int(n_vocab), "cal": calibrated}, sort_keys=True
        ).encode()
    ).hexdigest()[:12]
    path = d / f"{src.stem}-v{int(n_vocab)}-{digest}.gguf"
    return cache.cached_file(path, lambda tmp: make_padded(src, tmp, n_vocab, calibrated=calibrated))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m pymtp.bench.vocab",
        description="Write a glm4moe GGUF with its vocabulary padded to a real model's size.",
    )
    ap.add_argument("--n-vocab", type=int, required=True, help="e.g. 151552 (GLM-4.5) or 248320 (Qwen3.5/3.6)")
    ap.add_argument("--src", default=None, help="source glm4moe GGUF (default: the default model)")
    ap.add_argument("--out", default=None, help="output path (default: the cache, see padded_vocab_path)")
    ap.add_argument("--zeros", action="store_true", help="zero padded rows instead of calibrated ones")
    a = ap.parse_args(argv)
    if a.out is None:
        path = padded_vocab_path(a.n_vocab, a.src, calibrated=not a.zeros)
    else:
        from ..default_model import resolve

        path = make_padded(a.src or resolve("default"), a.out, a.n_vocab, calibrated=not a.zeros)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
