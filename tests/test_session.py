"""Session: what it owns (contexts, options, caches) and its default context length."""

from __future__ import annotations

import pytest

import pymtp
from pymtp.session import KV_BUDGET_BYTES, default_n_ctx, kv_bytes_per_position


def test_default_context_is_the_training_context_within_the_kv_budget(gguf, monkeypatch):
    with pymtp.load("tiny") as s:
        m = s.model
        # the tiny model: 4 trunk layers x 4 KV heads x (64 + 64) F16 values
        assert kv_bytes_per_position(m) == m.n_layer * 4 * (64 + 64) * 2
        assert s.n_ctx == default_n_ctx(m) == m.n_ctx_train == 512  # far below the 2 GiB budget
        assert KV_BUDGET_BYTES // kv_bytes_per_position(m) > 512
        monkeypatch.setenv("PYMTP_KV_BUDGET_MB", "1")  # 1 MiB holds 256 positions
        assert default_n_ctx(m) == 256
    with pymtp.load("tiny", n_ctx=300) as s:
        assert s.n_ctx == 300 and s.target.n_ctx >= 300


def test_nothing_is_attached_to_the_model(gguf):
    with pymtp.load(gguf("glm4moe")) as s:
        before = set(vars(s.model))
        pymtp.generate("x", s, max_tokens=4)
        assert set(vars(s.model)) == before
        assert s.target is s.target and s.draft is not None  # made once, then reused
    assert s.closed and s.model.closed  # it loaded the model, it closed it


def test_a_session_borrows_a_model(gguf):
    with pymtp.Model(gguf("glm4moe")) as m:
        with pymtp.Session(m, n_ctx=128) as s:
            assert s.n_ctx == 128 and pymtp.generate("x", s, max_tokens=3).tokens
        assert s.closed and not m.closed
        r = pymtp.generate("x", m, max_tokens=3)  # a Model gets a session for the call
        assert len(r.tokens) == 3 and not m.closed


def test_models_by_path_are_loaded_once(gguf):
    from pymtp.session import PATH_CACHE_SIZE, as_session

    p = gguf("glm4moe")
    r1 = pymtp.generate("def f(x):", str(p), max_tokens=4, ignore_eos=True)
    s, made = as_session(str(p))
    assert not made and as_session(p)[0] is s and not s.closed
    r2 = pymtp.generate(r1.prompt_tokens + r1.tokens, str(p), max_tokens=4)
    assert r2.stats.n_reused == len(r1.prompt_tokens) + len(r1.tokens) - 1  # its cache, too
    others = [gguf("glm4moe", seed=i + 1) for i in range(PATH_CACHE_SIZE)]
    for o in others:
        pymtp.generate("x", o, max_tokens=2)
    assert as_session(p)[0] is not s  # the oldest fell out: loaded again


def test_prompt_kinds(models):
    s = models("glm4moe")
    text = pymtp.generate("def f(x):", s, max_tokens=3, speculative=False)
    assert pymtp.generate(b"def f(x):", s, max_tokens=3, speculative=False).tokens == text.tokens  # UTF-8 text
    ids = pymtp.generate(text.prompt_tokens, s, max_tokens=3, speculative=False)
    assert ids.tokens == text.tokens
    import numpy as np

    assert pymtp.generate(np.array(text.prompt_tokens), s, max_tokens=3, speculative=False).tokens == text.tokens
    with pytest.raises(TypeError, match="item 1 is str 'b'"):
        pymtp.generate(["a", "b"][0:0] + [1, "b"], s)
    with pytest.raises(TypeError, match="one prompt"):
        pymtp.stream(["hello", "world"], s)
    both = pymtp.generate(["hello", "world"], s, max_tokens=2)  # a list of prompts: one result each
    assert [r.tokens for r in both] == [pymtp.generate(p, s, max_tokens=2).tokens for p in ("hello", "world")]
    with pytest.raises(ValueError, match="UTF-8"):
        pymtp.generate(b"\xff\xfe", s)
