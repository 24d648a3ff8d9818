"""pymtp._native.instrument: counts and times real calls into libpymtp, from any module
holding ``lib``, and puts the plain functions back afterwards."""

from __future__ import annotations

import pytest

from pymtp import _native, model
from pymtp._native import instrument, lib

NAMES = ("pymtp_last_error", "pymtp_build_info", "pymtp_tokenize")


def _plain() -> dict:
    return {name: getattr(lib, name) for name in NAMES}


def _is_plain(before: dict) -> bool:
    """lib holds the very function objects it held before (not wrappers)."""
    return all(getattr(lib, name) is before[name] for name in NAMES)


def test_every_module_holds_the_one_lib():
    assert model.lib is lib and _native.lib is lib
    assert lib.pymtp_last_error is lib._raw.pymtp_last_error  # the cffi function itself, cached


def test_calls_are_counted_and_timed_then_restored(models):
    m = models("glm4moe")
    plain = _plain()
    calls: list[tuple[str, float]] = []
    with instrument(lambda name, s: calls.append((name, s))):
        assert lib.pymtp_last_error is not plain["pymtp_last_error"]
        _native.build_info()
        m.tokenize("def f(x):")  # through pymtp.model's own `lib`
    names = [n for n, _ in calls]
    assert names[0] == "pymtp_build_info" and "pymtp_tokenize" in names
    assert all(isinstance(s, float) and s > 0 for _, s in calls)
    assert _is_plain(plain)
    n = len(calls)
    _native.build_info()
    assert len(calls) == n  # nothing counted after the block


def test_restored_after_an_exception_and_a_failing_call_is_counted():
    plain = _plain()
    calls: list[str] = []
    with pytest.raises(TypeError):
        with instrument(lambda name, s: calls.append(name)):
            lib.pymtp_last_error(1)  # cffi refuses the argument: the wrapper still reports
    assert calls == ["pymtp_last_error"]
    assert _is_plain(plain)


def test_nested_blocks_both_see_the_calls_and_unwind_in_order():
    plain = _plain()
    outer: list[str] = []
    inner: list[str] = []
    with instrument(lambda name, s: outer.append(name)):
        wrapped = lib.pymtp_build_info
        with instrument(lambda name, s: inner.append(name)):
            _native.build_info()
        assert lib.pymtp_build_info is wrapped
        _native.build_info()
    assert inner == ["pymtp_build_info"] and outer == ["pymtp_build_info"] * 2
    assert _is_plain(plain)
