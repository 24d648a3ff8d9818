"""Re-express a llama-architecture GGUF as glm4moe, and attach a trained NextN head.

llama.cpp has no MTP graph for ``llama``; ``glm4moe`` with every trunk block dense-leading
computes the same trunk (RMSNorm, GQA attention without biases, SiLU-gated FFN, tied or
separate output) and has a NextN graph. Three things differ and are rewritten here:

* names: ``llama.*`` hparams become ``glm4moe.*``; ``blk.N.ffn_norm`` becomes
  ``blk.N.post_attention_norm``;
* rope: llama rotates adjacent pairs (NORM), glm4moe the two halves of a head (NEOX).
  HF-to-GGUF conversion interleaved the rows of Q and K for NORM; un-interleaving them makes
  the NEOX rotation compute the same product. Each row of a quantized matrix (Q4_1, Q8_0,
  ...) is a run of independent blocks along the input dimension, so rows move as bytes,
  without requantizing;
* glm4moe's MoE keys (expert counts, gating) are required even with no MoE trunk block.

A head file (written by ``pymtp.train.head_export``) is a glm4moe GGUF holding only the
NextN block ``blk.<n_trunk>.*`` and the MoE hparams; ``attach_head`` merges it with a
converted trunk into one loadable file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

ARCH = "glm4moe"
_HEAD_KEYS = (
    "expert_count",
    "expert_used_count",
    "expert_shared_count",
    "expert_feed_forward_length",
    "expert_weights_scale",
    "expert_weights_norm",
    "expert_gating_func",
)
_TRUNK_TENSORS = {
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
}


def _gguf():
    try:
        import gguf
    except ImportError as e:  # pragma: no cover - gguf is a core dependency
        raise ImportError("writing GGUF files needs the 'gguf' package (pip install gguf)") from e
    return gguf


def _fields(reader) -> list[tuple[str, Any, Any, Any]]:
    """(key, value, type, sub_type) of every metadata field, in file order."""
    gguf = _gguf()
    out = []
    for key, f in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        out.append((key, f.contents(), vtype, sub))
    return out


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def unpermute_rope_rows(data: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of Q or K from llama's interleaved-pair order to NEOX's half-split order.

    HF->GGUF wrote row (h, j, s) of a head [j < d/2, s in {0, 1}] from HF row (h, s, j);
    ``data`` has one row per output feature (any dtype: floats or quantized bytes)."""
    rows = data.shape[0]
    if rows % (2 * n_head):
        raise ValueError(f"{rows} rows do not split into {n_head} heads of even size")
    half = rows // n_head // 2
    return np.ascontiguousarray(data.reshape(n_head, half, 2, *data.shape[1:]).swapaxes(1, 2).reshape(data.shape))


def _add_tensor(writer, name: str, t, data: np.ndarray | None = None, f16: bool = False) -> None:
    """Copy tensor t (its rows replaced by data when given); f16: dequantize a quantized
    matrix to F16 (for a trunk that decodes batches cheaply on CPU)."""
    gguf = _gguf()
    data = t.data if data is None else data
    if f16 and t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        writer.add_tensor(name, gguf.quants.dequantize(np.asarray(data), t.tensor_type).astype(np.float16))
    elif t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        writer.add_tensor(name, np.asarray(data))
    else:
        writer.add_tensor(name, np.asarray(data), raw_dtype=t.tensor_type)


def write_glm4moe(trunk: str | Path, out: str | Path, head: str | Path | None = None, *, f16: bool = False) -> Path:
    """Convert the llama-architecture ``trunk`` GGUF into glm4moe at ``out``, with the NextN
    block of ``head`` attached when given (else a trunk-only file with no MTP block).
    f16: store every quantized matrix dequantized to F16, the token embedding (= the tied output
    matrix) too: an F16 batch costs little more than one row on CPU, and llama.cpp's quantized
    matmuls re-quantize activations to 8 bits, which moves logits by up to 0.5 between a
    batched verify and a single-token decode (near-tie flips of greedy tokens)."""
    gguf = _gguf()
    src = gguf.GGUFReader(str(trunk))
    if _field(src, "general.architecture") != "llama":
        raise ValueError(f"{trunk}: expected a llama-architecture GGUF, got {_field(src, 'general.architecture')!r}")
    n_layer = int(_field(src, "llama.block_count"))
    n_head = int(_field(src, "llama.attention.head_count"))
    n_head_kv = int(_field(src, "llama.attention.head_count_kv", n_head))
    n_embd = int(_field(src, "llama.embedding_length"))
    if int(_field(src, "llama.rope.dimension_count", n_embd // n_head)) != n_embd // n_head:
        raise ValueError("partial rotary llama models are not supported")

    hd = gguf.GGUFReader(str(head)) if head is not None else None
    if hd is not None:
        if int(_field(hd, f"{ARCH}.embedding_length")) != n_embd:
            raise ValueError(f"{head}: head width {_field(hd, f'{ARCH}.embedding_length')} != trunk width {n_embd}")
        if int(_field(hd, f"{ARCH}.leading_dense_block_count")) != n_layer:
            raise ValueError(
                f"{head}: the head follows {_field(hd, f'{ARCH}.leading_dense_block_count')} "
                f"trunk blocks, this trunk has {n_layer}"
            )

    out = Path(out)
    w = gguf.GGUFWriter(str(out), ARCH)
    for key, val, vtype, sub in _fields(src):
        if key.startswith("llama."):
            key = ARCH + key[len("llama") :]
        if key in (f"{ARCH}.block_count", "general.file_type"):
            continue
        w.add_key_value(key, val, vtype, sub)
    # LLAMA_FTYPE_MOSTLY_F16 (1) when dequantized: what llama.cpp reports as the file's type
    w.add_key_value("general.file_type", 1 if f16 else _field(src, "general.file_type", 0), gguf.GGUFValueType.UINT32)
    n_nextn = 1 if hd is not None else 0
    w.add_uint32(f"{ARCH}.block_count", n_layer + n_nextn)
    w.add_uint32(f"{ARCH}.nextn_predict_layers", n_nextn)
    w.add_uint32(f"{ARCH}.leading_dense_block_count", n_layer)
    if hd is not None:
        for k in _HEAD_KEYS:
            f = hd.fields[f"{ARCH}.{k}"]
            w.add_key_value(f"{ARCH}.{k}", f.contents(), f.types[0])
    else:  # glm4moe asserts an expert count even when every block is dense
        w.add_uint32(f"{ARCH}.expert_count", 1)
        w.add_uint32(f"{ARCH}.expert_used_count", 1)
        w.add_uint32(f"{ARCH}.expert_shared_count", 0)
        w.add_uint32(f"{ARCH}.expert_feed_forward_length", 1)

    for t in src.tensors:
        parts = t.name.split(".")
        if parts[0] == "blk":
            kind = parts[2]
            if kind not in _TRUNK_TENSORS:
                raise ValueError(f"{trunk}: unexpected tensor {t.name} for a llama trunk")
            if kind == "ffn_norm":
                _add_tensor(w, f"blk.{parts[1]}.post_attention_norm.{parts[3]}", t)
            elif kind in ("attn_q", "attn_k"):
                rows = unpermute_rope_rows(t.data, n_head if kind == "attn_q" else n_head_kv)
                _add_tensor(w, t.name, t, rows, f16=f16)
            else:
                _add_tensor(w, t.name, t, f16=f16)
        elif t.name in ("token_embd.weight", "output_norm.weight", "output.weight"):
            _add_tensor(w, t.name, t, f16=f16)
        else:
            raise ValueError(f"{trunk}: unexpected tensor {t.name} for a llama trunk")
    if hd is not None:
        for t in hd.tensors:
            if not t.name.startswith(f"blk.{n_layer}."):
                raise ValueError(f"{head}: tensor {t.name} is not part of NextN block {n_layer}")
            _add_tensor(w, t.name, t)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def extract_head(model: str | Path, out: str | Path) -> Path:
    """Write the NextN block of a one-head glm4moe GGUF as a head file (the inverse of
    attaching it): its ``blk.<n_trunk>.*`` tensors and MoE hparams."""
    gguf = _gguf()
    src = gguf.GGUFReader(str(model))
    if _field(src, "general.architecture") != ARCH or int(_field(src, f"{ARCH}.nextn_predict_layers", 0)) != 1:
        raise ValueError(f"{model}: expected a glm4moe GGUF with one NextN block")
    n_trunk = int(_field(src, f"{ARCH}.block_count")) - 1
    w = gguf.GGUFWriter(str(out), ARCH)
    w.add_string("general.name", "pymtp NextN head")
    for k in ("embedding_length", "attention.head_count", "attention.head_count_kv") + _HEAD_KEYS:
        f = src.fields[f"{ARCH}.{k}"]
        w.add_key_value(f"{ARCH}.{k}", f.contents(), f.types[0])
    w.add_uint32(f"{ARCH}.leading_dense_block_count", n_trunk)
    w.add_uint32(f"{ARCH}.nextn_predict_layers", 1)
    w.add_uint32(f"{ARCH}.block_count", n_trunk + 1)
    for t in src.tensors:
        if t.name.startswith(f"blk.{n_trunk}."):
            _add_tensor(w, t.name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(out)
