"""The default thread count (pymtp.model.default_threads) and its override."""

from __future__ import annotations

import os

import pytest

import pymtp
from pymtp.model import default_threads


def test_one_core_is_left_free(monkeypatch):
    monkeypatch.delenv("PYMTP_THREADS", raising=False)
    n = default_threads()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert 1 <= n <= max(1, usable - 1)


def test_the_environment_overrides_it(monkeypatch, gguf):
    monkeypatch.setenv("PYMTP_THREADS", "3")
    assert default_threads() == 3
    with pymtp.load(gguf("glm4moe"), n_ctx=64) as s:
        assert len(pymtp.generate("a", s, max_tokens=2).tokens) == 2
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("PYMTP_THREADS", bad)
        with pytest.raises(ValueError, match="PYMTP_THREADS"):
            default_threads()
