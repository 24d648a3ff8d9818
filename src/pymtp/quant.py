"""pymtp.quantize: re-quantize a GGUF with llama.cpp, keeping the MTP block at its own type.

Quantizing the MTP tensors like the trunk lowers acceptance; the trunk's type sets what a
plain token and a batched verify cost. The README's quantization table has both, measured.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._native import check, ffi, lib
from .errors import ModelLoadError

# llama_ftype values (llama.h) for the whole-file type
FTYPES = {
    "F32": 0,
    "F16": 1,
    "Q4_0": 2,
    "Q4_1": 3,
    "Q8_0": 7,
    "Q5_0": 8,
    "Q5_1": 9,
    "Q2_K": 10,
    "Q3_K_M": 12,
    "Q4_K_S": 14,
    "Q4_K_M": 15,
    "Q5_K_S": 16,
    "Q5_K_M": 17,
    "Q6_K": 18,
    "IQ4_NL": 25,
    "BF16": 32,
}
# ggml_type values (ggml.h) for single tensors
GGML_TYPES = {
    "F32": 0,
    "F16": 1,
    "Q4_0": 2,
    "Q4_1": 3,
    "Q5_0": 6,
    "Q5_1": 7,
    "Q8_0": 8,
    "Q4_K": 12,
    "Q5_K": 13,
    "Q6_K": 14,
    "IQ4_NL": 20,
    "BF16": 30,
}


def mtp_blocks(path: str | os.PathLike[str]) -> list[int]:
    """Indices of the MTP / NextN blocks of a GGUF (the last nextn_predict_layers blocks)."""
    import gguf

    r = gguf.GGUFReader(str(path))
    arch = r.fields["general.architecture"].contents()
    n_field = r.fields.get(f"{arch}.block_count")
    nn_field = r.fields.get(f"{arch}.nextn_predict_layers")
    if n_field is None or nn_field is None:
        return []
    n, nn = int(n_field.contents()), int(nn_field.contents())
    return list(range(n - nn, n))


def quantize(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    type: str = "Q4_0",
    mtp_type: str | None = "F16",
    n_threads: int = 0,
    allow_requantize: bool = True,
) -> Path:
    """Write ``src`` quantized to ``type`` (a llama.cpp file type: Q4_0, Q4_K_M, Q8_0, F16, ...)
    at ``dst``; the MTP block's tensors get ``mtp_type`` (a tensor type: F16, Q8_0, ...;
    None quantizes them like the rest). Norms and other 1-D tensors stay F32 as llama.cpp does."""
    ftype = FTYPES.get(str(type).upper())
    if ftype is None:
        raise ValueError(f"type must be one of {', '.join(FTYPES)}, got {type!r}")
    mtp_t = None
    if mtp_type is not None:
        mtp_t = GGML_TYPES.get(str(mtp_type).upper())
        if mtp_t is None:
            raise ValueError(f"mtp_type must be one of {', '.join(GGML_TYPES)} or None, got {mtp_type!r}")
    src, dst = Path(src), Path(dst)
    if not src.is_file():
        raise FileNotFoundError(f"no such GGUF: {src}")
    if src.resolve() == dst.resolve():
        raise ValueError("src and dst must be different files")
    patterns: list[bytes] = []
    types: list[int] = []
    if mtp_t is not None:
        try:
            blocks = mtp_blocks(src)
        except Exception as e:  # the gguf reader's errors on a corrupt file vary
            raise ModelLoadError(f"cannot read '{src}' as GGUF: {e}") from None
        for b in blocks:
            patterns.append(rf"^blk\.{b}\.".encode())
            types.append(mtp_t)
    keep = [ffi.new("char[]", p) for p in patterns]
    c_patterns = ffi.new("const char *[]", keep) if keep else ffi.NULL
    c_types = ffi.new("int32_t[]", types) if types else ffi.NULL
    check(
        lib.pymtp_quantize(
            os.fsencode(src),
            os.fsencode(dst),
            ftype,
            c_patterns,
            c_types,
            len(types),
            int(allow_requantize),
            int(n_threads),
        )
    )
    return dst
