"""Reading a source GGUF exactly and copying it, edited, into a new one: what the bench's
derived models (the deep variant, bench/deep.py; the padded vocabulary, bench/vocab.py) share.

Strings are kept as raw bytes and arrays with their element type, so that a field nobody
edits is written back bit for bit."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: The architecture both derived models take (dense trunk blocks, one NextN/MTP block).
ARCH = "glm4moe"


def field_value(field) -> tuple[Any, Any, Any]:
    """(value, type, sub_type) of a reader field, strings as raw bytes (exact round trip)."""
    from gguf import GGUFValueType

    vtype = field.types[0]
    if vtype == GGUFValueType.ARRAY:
        sub = field.types[-1]
        if len(field.types) > 2:
            raise ValueError(f"{field.name}: nested arrays are not supported")
        if sub == GGUFValueType.STRING:
            return [bytes(field.parts[i]) for i in field.data], vtype, sub
        return field.contents(), vtype, sub
    if vtype == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]), vtype, None
    return field.contents(), vtype, None


def scalar(fields: dict, key: str, default: Any = None) -> Any:
    """A scalar field's value (strings decoded); default when absent, an error without one."""
    f = fields.get(key)
    if f is None:
        if default is None:
            raise ValueError(f"the source GGUF lacks {key}")
        return default
    from gguf import GGUFValueType

    if f.types[0] == GGUFValueType.ARRAY:
        raise ValueError(f"{key} is an array (per-layer values), not the scalar expected")
    v = f.contents()
    return v.decode() if isinstance(v, bytes) else v


def read_source(src_gguf: Path, maker: str):
    """A reader of ``src_gguf``, which must be a glm4moe GGUF (maker: who asks, for the error)."""
    import gguf

    reader = gguf.GGUFReader(str(src_gguf))
    arch = scalar(reader.fields, "general.architecture")
    if arch != ARCH:
        raise ValueError(f"{maker} supports {ARCH} GGUFs, {src_gguf.name} is {arch}")
    return reader


def tensor_array(t) -> np.ndarray:
    """An F32 or F16 reader tensor as a numpy array in numpy's axis order (reversed ggml ne)."""
    from gguf import GGMLQuantizationType as Q

    if t.tensor_type not in (Q.F32, Q.F16):
        raise ValueError(f"{t.name}: only F32 and F16 tensors can be padded, not {t.tensor_type.name}")
    shape = tuple(int(x) for x in reversed(list(t.shape)))  # numpy order = reversed ggml ne
    return np.asarray(t.data).reshape(shape)


def source_key(src: Path) -> str:
    """A cache key of a source file: its size, mtime and first MB."""
    st = src.stat()
    h = hashlib.sha256()
    h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    with open(src, "rb") as f:
        h.update(f.read(1 << 20))
    return h.hexdigest()


def copy_fields(fields: dict, writer, edit: Callable[[str, Any], Any]) -> set[str]:
    """Write the source's metadata to writer, each value through edit(name, value); the
    architecture (the writer's own) and the reader's GGUF.* entries are not copied, the
    alignment keeps its meaning. Returns the names written."""
    written = set()
    for name, field in fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        val, vtype, sub = field_value(field)
        if name == "general.alignment":
            writer.add_custom_alignment(int(val))
        else:
            writer.add_key_value(name, edit(name, val), vtype, sub)
        written.add(name)
    return written


def finish(writer) -> None:
    """Write the header, the metadata and the tensors, and close the file."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
