"""pymtp.bench.gguf_copy: a source GGUF copied through an edit that changes nothing is the same
model (every field's value and type, every tensor's bytes); one edited field changes alone."""

from __future__ import annotations

import gguf as gguf_lib
import numpy as np
import pytest

from pymtp.bench.deep import make_deep
from pymtp.bench.gguf_copy import ARCH, copy_fields, finish, read_source, scalar, tensor_array
from pymtp.bench.vocab import make_padded


def _copy(src, dst, edit):
    reader = gguf_lib.GGUFReader(str(src))
    writer = gguf_lib.GGUFWriter(str(dst), ARCH)
    written = copy_fields(reader.fields, writer, edit)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    finish(writer)
    return written


def _fields(path):
    r = gguf_lib.GGUFReader(str(path))
    return {k: (f.types, f.contents()) for k, f in r.fields.items() if not k.startswith("GGUF.")}, r


def test_an_unedited_copy_is_the_same_model(gguf, tmp_path):
    src = gguf("glm4moe")
    dst = tmp_path / "copy.gguf"
    written = _copy(src, dst, lambda name, val: val)
    (a, ra), (b, rb) = _fields(src), _fields(dst)
    assert a == b
    assert written == set(a) - {"general.architecture"}
    assert [t.name for t in ra.tensors] == [t.name for t in rb.tensors]
    for x, y in zip(ra.tensors, rb.tensors):
        assert x.tensor_type == y.tensor_type
        np.testing.assert_array_equal(np.asarray(x.data), np.asarray(y.data))


def test_an_edited_field_changes_alone(gguf, tmp_path):
    src = gguf("glm4moe")
    dst = tmp_path / "named.gguf"
    _copy(src, dst, lambda name, val: val + b"-x" if name == "general.name" else val)
    (a, _), (b, rb) = _fields(src), _fields(dst)
    assert scalar(rb.fields, "general.name") == scalar(gguf_lib.GGUFReader(str(src)).fields, "general.name") + "-x"
    assert {k for k in a if a[k] != b[k]} == {"general.name"}


def test_scalar_and_tensor_array_refuse_what_they_cannot_read(gguf):
    r = gguf_lib.GGUFReader(str(gguf("glm4moe")))
    assert scalar(r.fields, "general.architecture") == ARCH
    assert scalar(r.fields, "no.such.key", 7) == 7
    with pytest.raises(ValueError, match="lacks no.such.key"):
        scalar(r.fields, "no.such.key")
    with pytest.raises(ValueError, match="scalar"):
        scalar(r.fields, "tokenizer.ggml.tokens")
    t = next(t for t in r.tensors if t.name == "token_embd.weight")
    assert tensor_array(t).shape == tuple(reversed([int(x) for x in t.shape]))


def test_the_derived_models_refuse_another_architecture(gguf, tmp_path):
    other = gguf("qwen35")
    assert read_source(gguf("glm4moe"), "x").fields  # the one they take
    with pytest.raises(ValueError, match="make_deep supports glm4moe GGUFs, .* is qwen35"):
        make_deep(other, tmp_path / "deep.gguf")
    with pytest.raises(ValueError, match="make_padded supports glm4moe GGUFs, .* is qwen35"):
        make_padded(other, tmp_path / "vocab.gguf", 100_000)
    assert not list(tmp_path.iterdir())
