"""pymtp.convert (llama -> glm4moe, heads attached) and pymtp.quantize (pymtp.quant), on fixtures.

The real trunk's conversion is tested in test_smollm2.py; here a random-weight llama
fixture (tied output, GQA) checks the arithmetic exactly: in F32 the converted file's logits
equal the original's to float rounding (measured 2.6e-5 with logits of std 8.6), which a
wrong rope permutation would break at every position after the first."""

from __future__ import annotations

import numpy as np
import pytest

import pymtp
from pymtp import convert
from pymtp.quant import mtp_blocks, quantize
from pymtp_testing import fixtures

TEXT = "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n" * 2


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("convert")
    llama = fixtures.make_fixture("llama", d / "llama.gguf")
    glm = fixtures.make_fixture("glm4moe", d / "glm4moe.gguf")
    head = convert.extract_head(glm, d / "head.gguf")
    return {
        "dir": d,
        "llama": llama,
        "glm4moe": glm,
        "head": head,
        "converted": convert.write_glm4moe(llama, d / "converted.gguf"),
        "with_head": convert.write_glm4moe(llama, d / "with-head.gguf", head=head),
    }


def logits_of(path, text=TEXT):
    with pymtp.Model(path) as m:
        toks = m.tokenize(text)
        with pymtp.TargetContext(m, n_ctx=512) as t:
            t.decode(toks, 0)
            return t.logits().copy()


def test_unpermute_inverts_the_hf_to_gguf_permutation():
    rng = np.random.default_rng(0)
    for n_head, head_dim, width in ((9, 64, 5), (3, 64, 7), (4, 16, 3)):
        hf = rng.standard_normal((n_head * head_dim, width))
        # what HF -> GGUF conversion does to Q and K rows for llama's NORM rope
        gguf_rows = hf.reshape(n_head, 2, head_dim // 2, width).swapaxes(1, 2).reshape(hf.shape)
        assert np.array_equal(convert.unpermute_rope_rows(gguf_rows, n_head), hf)
    with pytest.raises(ValueError):
        convert.unpermute_rope_rows(np.zeros((10, 4)), 3)


def test_converted_llama_computes_the_same_logits(files):
    want = logits_of(files["llama"])
    for key in ("converted", "with_head"):
        got = logits_of(files[key])
        assert np.abs(got - want).max() <= 1e-3, key
        assert (got.argmax(1) == want.argmax(1)).all(), key
    assert want.std() > 2.0  # not degenerate: rope and attention matter here


def test_converted_file_is_glm4moe_with_or_without_a_head(files):
    with pymtp.Model(files["converted"]) as m:
        assert m.architecture == "glm4moe" and m.n_mtp_layers == 0 and not m.mtp_loaded
    with pymtp.Model(files["with_head"]) as m:
        assert m.architecture == "glm4moe" and m.n_mtp_layers == 1 and m.mtp_loaded
        assert m.meta("glm4moe.leading_dense_block_count") == "2"


def test_attached_head_drafts_and_greedy_stays_lossless(files):
    m = pymtp.load(files["with_head"], n_ctx=512)
    try:
        for k in (1, 2, 3):
            plain = pymtp.generate("def f(", m, max_tokens=40, speculative=False, ignore_eos=True)
            spec = pymtp.generate("def f(", m, max_tokens=40, speculative={"n_draft": k}, ignore_eos=True)
            assert spec.tokens == plain.tokens
            assert spec.stats.n_drafted > 0
    finally:
        m.close()


def test_extracted_head_round_trips(files):
    import gguf

    again = convert.extract_head(files["with_head"], files["dir"] / "head-again.gguf")
    a = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(files["head"])).tensors}
    b = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(again)).tensors}
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_quantized_rows_move_as_bytes(files):
    """A Q4_1 llama converts without requantizing: Q/K rows are the original rows, reordered."""
    import gguf

    q = quantize(files["llama"], files["dir"] / "llama-q4_1.gguf", type="Q4_1")
    conv = convert.write_glm4moe(q, files["dir"] / "converted-q4_1.gguf")
    src = {t.name: t for t in gguf.GGUFReader(str(q)).tensors}
    dst = {t.name: t for t in gguf.GGUFReader(str(conv)).tensors}
    assert src["blk.0.attn_q.weight"].tensor_type == gguf.GGMLQuantizationType.Q4_1
    for name, t in src.items():
        out = dst[name.replace("ffn_norm", "post_attention_norm")]
        assert out.tensor_type == t.tensor_type
        if ".attn_q." in name or ".attn_k." in name:
            n_head = 4 if ".attn_q." in name else 2
            assert np.array_equal(np.asarray(out.data), convert.unpermute_rope_rows(np.asarray(t.data), n_head))
        else:
            assert np.array_equal(np.asarray(out.data), np.asarray(t.data))
    want, got = logits_of(q), logits_of(conv)
    assert (got.argmax(1) == want.argmax(1)).mean() >= 0.95


def test_convert_rejects_what_it_cannot_express(files):
    with pytest.raises(ValueError, match="llama-architecture"):
        convert.write_glm4moe(files["glm4moe"], files["dir"] / "x.gguf")
    with pytest.raises(ValueError, match="one NextN block"):
        convert.extract_head(files["llama"], files["dir"] / "y.gguf")


def test_quantize_keeps_the_mtp_block_at_its_own_type(files):
    import gguf

    assert mtp_blocks(files["glm4moe"]) == [2]
    assert mtp_blocks(files["llama"]) == []
    out = quantize(files["glm4moe"], files["dir"] / "q4_0.gguf", type="Q4_0", mtp_type="F16")
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(str(out)).tensors}
    assert types["blk.0.ffn_up.weight"] == gguf.GGMLQuantizationType.Q4_0
    assert types["blk.2.nextn.eh_proj.weight"] == gguf.GGMLQuantizationType.F16
    assert types["blk.2.ffn_up_exps.weight"] == gguf.GGMLQuantizationType.F16
    assert types["blk.2.attn_norm.weight"] == gguf.GGMLQuantizationType.F32
    same = quantize(files["glm4moe"], files["dir"] / "q4_0-all.gguf", type="Q4_0", mtp_type=None)
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(str(same)).tensors}
    assert types["blk.2.nextn.eh_proj.weight"] == gguf.GGMLQuantizationType.Q4_0
    with pymtp.Model(out) as m:
        assert m.mtp_loaded


def test_quantize_checks_its_arguments(files, tmp_path):
    with pytest.raises(ValueError, match="type must be one of"):
        quantize(files["glm4moe"], tmp_path / "a.gguf", type="Q3_X")
    with pytest.raises(ValueError, match="mtp_type"):
        quantize(files["glm4moe"], tmp_path / "a.gguf", mtp_type="Q4_K_M")
    with pytest.raises(ValueError, match="different"):
        quantize(files["glm4moe"], files["glm4moe"])
    with pytest.raises(FileNotFoundError):
        quantize(tmp_path / "absent.gguf", tmp_path / "a.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises((pymtp.PymtpError, ValueError)):
        quantize(bad, tmp_path / "b.gguf")
