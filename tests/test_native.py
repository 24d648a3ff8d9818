"""The native core: the shim and the binding, on random-weight fixtures."""

from __future__ import annotations

import gc
import logging
import platform

import numpy as np
import pytest
from conftest import SAME_ROW_ATOL

import pymtp
from pymtp import DraftContext, Model, TargetContext
from pymtp.errors import InvalidHandleError, ModelLoadError, UnsupportedError

TEXT = "def add(a, b):\n    return a + b  # héllo ✓"


@pytest.fixture(scope="module")
def glm(gguf):
    m = Model(gguf("glm4moe"))
    yield m
    m.close()


def test_model_facts(glm, gguf):
    assert glm.path == gguf("glm4moe")
    assert glm.architecture == "glm4moe"
    assert glm.n_vocab == 304
    assert glm.n_embd == 64
    assert glm.n_layer == 2  # trunk blocks, MTP block not counted
    assert glm.n_mtp_layers == 1
    assert glm.mtp_loaded
    assert glm.n_ctx_train == 2048
    assert glm.is_recurrent is False
    assert glm.bos is not None and glm.eos is not None
    assert glm.is_eog(glm.eos) and not glm.is_eog(glm.tokenize("a", add_special=False)[0])
    assert "glm4moe" in repr(glm)


def test_system_info_names_the_cpu_and_the_features_in_use():
    cpu, backends = pymtp.system_info().split("; ", 1)
    assert cpu
    features = backends[backends.index("CPU : ") + len("CPU : ") :].split(" | ")
    assert all(name and value for name, value in (f.split(" = ") for f in features)), features
    if platform.machine() in ("x86_64", "AMD64"):
        assert "SSE3 = 1" in features


def test_hybrid_and_chained_facts(models):
    q = models("qwen35")
    assert q.is_recurrent and q.is_hybrid and q.supports_rollback
    s = models("step35")
    assert s.n_mtp_layers == 3 and s.n_layer == 2 and not s.is_recurrent


def test_load_without_mtp_blocks(gguf):
    with Model(gguf("glm4moe"), mtp=False) as m:
        assert m.n_mtp_layers == 1 and not m.mtp_loaded
        t = TargetContext(m, n_ctx=64)
        with pytest.raises(UnsupportedError, match="speculative=False"):
            DraftContext(t)
        t.decode(m.tokenize("abc"), 0)
        with pytest.raises(UnsupportedError, match="no hidden rows"):
            t.hidden()


def test_tokenize_round_trip(glm):
    toks = glm.tokenize(TEXT, add_special=False)
    assert all(0 <= t < glm.n_vocab for t in toks)
    assert glm.detokenize(toks) == TEXT
    assert b"".join(glm.token_bytes(t) for t in toks) == TEXT.encode()
    with_bos = glm.tokenize(TEXT)
    assert with_bos[0] == glm.bos and with_bos[1:] == toks
    long = "x = 1\n" * 2000
    assert glm.detokenize(glm.tokenize(long, add_special=False)) == long


def test_decode_shapes_and_outputs(glm):
    toks = glm.tokenize(TEXT)
    with TargetContext(glm, n_ctx=256, n_batch=64) as t:
        t.decode(toks, 0)
        logits, hidden = t.logits(), t.hidden()
        assert logits.shape == (len(toks), glm.n_vocab) and logits.dtype == np.float32
        assert hidden.shape == (len(toks), glm.n_embd)
        assert np.isfinite(logits).all() and np.isfinite(hidden).all()
        assert not logits.flags.writeable
        assert t.pos_max() == len(toks) - 1
        # only the rows asked for come back; hidden rows come for every token
        t.seq_rm(0)
        out = np.zeros(len(toks), dtype=np.uint8)
        out[[3, -1]] = 1
        t.decode(toks, 0, output=out)
        assert t.logits().shape == (2, glm.n_vocab)
        np.testing.assert_allclose(t.logits()[1], logits[-1], rtol=0, atol=SAME_ROW_ATOL)
        assert t.hidden().shape == (len(toks), glm.n_embd)


def test_draft_context_uses_handed_off_hidden_rows(glm):
    toks = glm.tokenize(TEXT)
    with TargetContext(glm, n_ctx=256) as t:
        t.decode(toks, 0)
        h = t.hidden().copy()
        d = DraftContext(t)
        # token x(p) pairs with hidden h(p-1): feed tokens 1.. with rows 0..
        d.decode(toks[1:], 1, h[0], h[1:-1])
        dl = d.logits().copy()
        assert dl.shape == (len(toks) - 1, glm.n_vocab) and np.isfinite(dl).all()
        assert d.hidden().shape == (len(toks) - 1, glm.n_embd)
        # the hidden rows matter: other rows give other logits
        d.seq_rm(0)
        d.decode(toks[1:], 1, np.zeros_like(h[0]), np.zeros_like(h[1:-1]))
        assert not np.allclose(d.logits(), dl)
        d.close()


def test_chained_heads_select_different_blocks(models):
    m = models("step35")
    toks = m.tokenize(TEXT)
    with TargetContext(m, n_ctx=256) as t:
        t.decode(toks, 0)
        h = t.hidden().copy()
        d = DraftContext(t)
        rows = []
        for head in range(m.n_mtp_layers):
            d.set_head(head)
            d.seq_rm(0)
            d.decode(toks[1:], 1, h[0], h[1:-1], output=[0] * (len(toks) - 2) + [1])
            rows.append(d.logits()[0].copy())
        assert not np.allclose(rows[0], rows[1])
        with pytest.raises(ValueError, match="out of range"):
            d.set_head(3)
        d.close()


def _logits_after(m, prefix, extra, keep, suffix, *, n_rs_seq=0, checkpoint=False):
    """Decode prefix, then extra, roll back all but `keep` tokens of extra, then decode suffix:
    the logits of suffix."""
    with TargetContext(m, n_ctx=256, n_rs_seq=n_rs_seq) as t:
        t.decode(prefix, 0)
        if checkpoint:
            t.checkpoint_save()
        if extra:
            t.decode(extra, len(prefix))
        end = len(prefix) + keep
        if checkpoint:
            t.checkpoint_restore()
            t.seq_rm(len(prefix))
            if keep:
                t.decode(extra[:keep], len(prefix))
        elif keep < len(extra):
            t.seq_rm(end)
        assert t.pos_max() == end - 1
        t.decode(suffix, end)
        return t.logits().copy()


@pytest.mark.parametrize(
    "family,how,keep",
    [
        ("glm4moe", "kv", 0),
        ("glm4moe", "kv", 2),
        ("step35", "kv", 1),
        ("deepseek2", "kv", 0),
        ("qwen35", "n_rs_seq", 1),
        ("qwen35", "n_rs_seq", 3),
        ("qwen35moe", "n_rs_seq", 2),
        ("qwen35", "checkpoint", 0),
        ("qwen35", "checkpoint", 2),
        ("qwen3next", "checkpoint", 1),
    ],
)
def test_seq_rm_rollback_gives_the_logits_of_the_shorter_sequence(models, family, how, keep):
    m = models(family)
    toks = m.tokenize(TEXT)
    prefix, extra, suffix = toks[:10], toks[10:14], toks[14:20]
    kw = {"n_rs_seq": 4} if how == "n_rs_seq" else {"checkpoint": how == "checkpoint"}
    expect = _logits_after(m, prefix, extra[:keep], keep, suffix)
    got = _logits_after(m, prefix, extra, keep, suffix, **kw)
    if m.is_recurrent and keep:
        # The kept recurrent state comes from inside a 4-token batch, the reference's from a
        # batch of `keep`: the same math in another summation order, equal to float rounding.
        np.testing.assert_allclose(got, expect, rtol=0, atol=max(1e-4, SAME_ROW_ATOL))
    else:
        np.testing.assert_allclose(got, expect, rtol=0, atol=SAME_ROW_ATOL)


def test_recurrent_rollback_is_bounded_by_the_last_decode(models):
    """Snapshots cover the tokens of the last decode only: rolling back all of it is refused."""
    m = models("qwen35")
    toks = m.tokenize(TEXT)
    with TargetContext(m, n_ctx=128, n_rs_seq=8) as t:
        t.decode(toks[:8], 0)
        t.decode(toks[8:12], 8)
        with pytest.raises(UnsupportedError, match="at most 3 token"):
            t.seq_rm(8)
        t.seq_rm(9)
        assert t.pos_max() == 8


def test_partial_rm_without_snapshots_is_refused_on_hybrid_models(models):
    m = models("qwen35")
    toks = m.tokenize(TEXT)
    with TargetContext(m, n_ctx=128) as t:
        t.decode(toks[:8], 0)
        with pytest.raises(UnsupportedError, match="recurrent state"):
            t.seq_rm(4)
        assert t.pos_max() == 7
        t.seq_rm(0)  # removing the whole sequence always works
        assert t.pos_max() == -1


def test_seq_cp(glm):
    toks = glm.tokenize(TEXT)
    with TargetContext(glm, n_ctx=128, n_seq_max=2) as t:
        t.decode(toks[:6], 0)
        t.seq_cp(0, 1)
        assert t.pos_max(1) == 5
        t.decode(toks[6:8], 6, seq_id=1)
        assert t.pos_max(0) == 5 and t.pos_max(1) == 7


# ---- errors: a Python exception, and the process stays healthy --------------------------------


@pytest.fixture()
def ctx(glm):
    t = TargetContext(glm, n_ctx=32, n_batch=8)
    yield t
    t.close()


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda t, m: t.decode([m.n_vocab], 0), "out of range"),
        (lambda t, m: t.decode([-1], 0), "out of range"),
        (lambda t, m: t.decode([2**40], 0), "int32"),
        (lambda t, m: t.decode([1] * 9, 0), "n_batch"),
        (lambda t, m: t.decode([], 0), "n_batch"),
        (lambda t, m: t.decode([1, 2], t.n_ctx - 1), "do not fit the context"),
        (lambda t, m: t.decode([1], -1), "do not fit the context"),
        (lambda t, m: t.decode([1], 0, seq_id=1), "seq_id"),
        (lambda t, m: t.decode([1, 2], 0, output=[1]), "output flags"),
        (lambda t, m: (t.decode([1], 0), t.decode([1], 5)), "does not continue"),
        (lambda t, m: t.logits(), "no logits"),
        (lambda t, m: t.seq_rm(-2), "position range"),
        (lambda t, m: t.pos_max(3), "seq_id"),
        (lambda t, m: t.checkpoint_restore(), "no checkpoint"),
        (lambda t, m: t.set_threads(0), "thread"),
        (lambda t, m: m.detokenize([m.n_vocab + 5]), "out of range"),
        (lambda t, m: m.token_bytes(-3), "out of range"),
    ],
)
def test_bad_input_raises_and_the_context_still_works(glm, ctx, call, match):
    with pytest.raises(ValueError, match=match):
        call(ctx, glm)
    ctx.seq_rm(0)
    ctx.decode([1, 2, 3], 0)
    assert ctx.logits().shape == (3, glm.n_vocab)


def test_bad_draft_input(glm):
    with TargetContext(glm, n_ctx=32) as t, DraftContext(t) as d:
        row = np.zeros(glm.n_embd, dtype=np.float32)
        with pytest.raises(ValueError, match="float32"):
            d.decode([1], 1, row.astype(np.float64))
        with pytest.raises(ValueError, match="need 2 x 64"):
            d.decode([1, 2, 3], 1, row, np.zeros(glm.n_embd, dtype=np.float32))
        from pymtp._native import check, lib

        with pytest.raises(ValueError, match="only a draft context"):
            check(lib.pymtp_draft_set_head(t._h, 0))
        with pytest.raises(ValueError, match="draft context binds to a target"):
            DraftContext.__new__(DraftContext).__init__(d)  # a draft bound to a draft
        d.decode([1, 2], 1, row, row)
        assert d.logits().shape == (2, glm.n_vocab)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"n_batch": 0}, "n_batch"),
        ({"n_ctx": -1}, "n_ctx"),
        ({"n_rs_seq": 1000}, "n_rs_seq"),
        ({"n_seq_max": 0}, "n_seq_max"),
    ],
)
def test_bad_context_params(glm, kwargs, match):
    with pytest.raises(ValueError, match=match):
        TargetContext(glm, **kwargs)


def test_closed_handles_raise(gguf):
    m = Model(gguf("glm4moe"))
    t = TargetContext(m, n_ctx=32)
    d = DraftContext(t)
    t.decode([1, 2], 0)
    view = t.logits()
    m.close()  # closes the contexts first
    assert m.closed and t.closed and d.closed
    for call in (
        lambda: t.decode([1], 0),
        lambda: t.logits(),
        lambda: d.set_head(0),
        lambda: m.tokenize("x"),
        lambda: TargetContext(m),
    ):
        with pytest.raises(InvalidHandleError, match="closed"):
            call()
    del view
    m.close()  # closing twice is fine


def test_native_layer_refuses_freed_handles(glm):
    """The shim itself checks handles, whatever the Python wrapper does."""
    from pymtp._native import ffi, lib

    t = TargetContext(glm, n_ctx=32)
    h = t._h
    t.close()
    assert lib.pymtp_ctx_free(h) == lib.PYMTP_ERR_HANDLE
    tok, pos, seq = ffi.new("int32_t[]", [1]), ffi.new("int32_t[]", [0]), ffi.new("int32_t[]", [0])
    assert lib.pymtp_decode_rows(h, tok, pos, seq, 1, ffi.NULL, ffi.NULL) == lib.PYMTP_ERR_HANDLE
    assert lib.pymtp_decode_rows(ffi.NULL, tok, pos, seq, 1, ffi.NULL, ffi.NULL) == lib.PYMTP_ERR_HANDLE
    assert "invalid context handle" in ffi.string(lib.pymtp_last_error()).decode()


def test_model_with_open_context_cannot_be_freed_natively(glm):
    from pymtp._native import lib

    with TargetContext(glm, n_ctx=32):
        assert lib.pymtp_model_free(glm._h) == lib.PYMTP_ERR_ARG
    assert not glm.closed


@pytest.mark.parametrize(
    "content,match",
    [
        (None, "not found"),
        (b"", "not a GGUF"),
        (b"PK\x03\x04 not a gguf at all", "not a GGUF"),
        ("truncated", "could not load"),
    ],
)
def test_bad_model_files(tmp_path, gguf, content, match):
    path = tmp_path / "bad.gguf"
    if content == "truncated":
        data = gguf("glm4moe").read_bytes()
        path.write_bytes(data[: len(data) // 3])
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelLoadError, match=match):
        Model(path)


def test_dropped_objects_are_freed(gguf):
    from pymtp._native import lib

    m = Model(gguf("glm4moe"))
    h = m._h
    for _ in range(5):
        t = TargetContext(m, n_ctx=32)
        DraftContext(t)
        del t
        gc.collect()
    # every context was freed, so the native layer lets the model go
    del m
    gc.collect()
    assert lib.pymtp_model_free(h) == lib.PYMTP_ERR_HANDLE


def test_llama_logs_reach_python_logging(gguf, caplog):
    pymtp.set_log_level("info")
    try:
        with caplog.at_level(logging.INFO, logger="pymtp.llama"):
            Model(gguf("glm4moe")).close()
    finally:
        pymtp.set_log_level(None)
    assert any(r.name == "pymtp.llama" for r in caplog.records)
    caplog.clear()
    Model(gguf("glm4moe")).close()  # quiet by default
    assert not [r for r in caplog.records if r.name == "pymtp.llama"]


def test_build_info():
    assert "0c1e57098bba43ac29e6e3b677cdceebdd22334f" in pymtp.build_info()
    assert "CPU" in pymtp.build_info()
