"""The cffi binding: loads libpymtp and turns its status codes into exceptions.

ABI mode over the declarations of native/shim/pymtp.h (installed beside the
library), so the package needs no compiler at import time.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cffi

from .errors import (
    ContextFullError,
    DecodeError,
    InvalidHandleError,
    ModelLoadError,
    PymtpError,
    UnsupportedError,
)

_HERE = Path(__file__).resolve().parent
_LIB_NAMES = ("libpymtp.so", "libpymtp.dylib", "pymtp.dll")

ffi = cffi.FFI()


def _find(names: tuple[str, ...], env: str) -> Path:
    override = os.environ.get(env)
    if override:
        return Path(override)
    for name in names:
        candidate = _HERE / name
        if candidate.exists():
            return candidate
    raise ImportError(
        f"pymtp's native library ({names[0]}) is not installed beside {_HERE}. "
        "Install pymtp with pip (it builds the library), or point "
        f"{env} at a built copy."
    )


def _cdef_text(header: Path) -> str:
    text = header.read_text()
    match = re.search(r"/\* cffi:begin \*/(.*)/\* cffi:end \*/", text, re.S)
    if not match:
        raise ImportError(f"{header} has no cffi section")
    return match.group(1)


class _Lib:
    """The cffi library as every module holds it (``from ._native import lib``).

    Each name is looked up in the cffi library once and kept as an instance attribute,
    so a call costs one attribute lookup, as on the cffi library itself. ``instrument``
    swaps timed wrappers in for the ``pymtp_*`` functions while it runs."""

    def __init__(self, raw: Any) -> None:
        self.__dict__["_raw"] = raw

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._raw, name)  # AttributeError for a name the header lacks
        self.__dict__[name] = value
        return value

    def __dir__(self) -> list[str]:
        return dir(self._raw)


_lib_path = _find(_LIB_NAMES, "PYMTP_LIBRARY")
_header = Path(os.environ.get("PYMTP_HEADER", _lib_path.with_name("pymtp.h")))
ffi.cdef(_cdef_text(_header))
lib = _Lib(ffi.dlopen(str(_lib_path)))


@contextmanager
def instrument(on_call: Callable[[str, float], None]) -> Iterator[None]:
    """Within the block, every call into libpymtp (from any module, any thread) also
    calls ``on_call(name, seconds)`` once it returns or raises. The plain functions are
    back on exit, also when the block raises. Blocks may nest."""
    pc = time.perf_counter

    def timed(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            t = pc()
            try:
                return f(*args)
            finally:
                on_call(name, pc() - t)

        call.__name__ = call.__qualname__ = name
        return call

    raw = lib._raw
    names = [n for n in dir(raw) if n.startswith("pymtp_") and ffi.typeof(getattr(raw, n)).kind == "function"]
    before = {name: getattr(lib, name) for name in names}
    try:
        for name in names:
            lib.__dict__[name] = timed(name, before[name])
        yield
    finally:
        lib.__dict__.update(before)


_ERRORS: dict[int, type[Exception]] = {
    lib.PYMTP_ERR_ARG: ValueError,
    lib.PYMTP_ERR_HANDLE: InvalidHandleError,
    lib.PYMTP_ERR_LOAD: ModelLoadError,
    lib.PYMTP_ERR_DECODE: DecodeError,
    lib.PYMTP_ERR_UNSUPPORTED: UnsupportedError,
}


def last_error() -> str:
    return str(ffi.string(lib.pymtp_last_error()).decode("utf-8", "replace"))


def check(rc: int) -> int:
    """Return rc when it is not an error, else raise the matching exception."""
    if rc >= 0:
        return rc
    message = last_error() or f"pymtp native call failed with code {rc}"
    if rc == lib.PYMTP_ERR_DECODE and "no KV cache slot" in message:
        raise ContextFullError(message)
    exc = _ERRORS.get(rc, PymtpError)
    if exc is ValueError:
        raise InvalidArgumentError(message)
    raise exc(message)


class InvalidArgumentError(PymtpError, ValueError):
    """An argument the native layer refused (range, size, order)."""


_ERRORS[lib.PYMTP_ERR_ARG] = InvalidArgumentError


# ---- llama.cpp logs -> Python logging ----------------------------------------------

llama_log = logging.getLogger("pymtp.llama")
_LEVELS = {
    lib.PYMTP_LOG_DEBUG: logging.DEBUG,
    lib.PYMTP_LOG_INFO: logging.INFO,
    lib.PYMTP_LOG_WARN: logging.WARNING,
    lib.PYMTP_LOG_ERROR: logging.ERROR,
}


@ffi.callback("void(int, const char *)")  # type: ignore[untyped-decorator]  # cffi has no type information
def _on_log(level: int, text: Any) -> None:  # pragma: no cover - exercised through llama.cpp
    try:
        llama_log.log(_LEVELS.get(level, logging.INFO), "%s", ffi.string(text).decode("utf-8", "replace"))
    except Exception:
        pass  # a log line must never raise into C


def set_log_level(level: str | int | None) -> None:
    """Forward llama.cpp's log lines at or above level to the 'pymtp.llama' logger.

    None silences llama.cpp (the default, unless PYMTP_LOG is set)."""
    if level is None:
        lib.pymtp_log_set(ffi.NULL, lib.PYMTP_LOG_ERROR + 1)
        return
    if isinstance(level, str):
        level = logging.getLevelName(level.upper())
        if not isinstance(level, int):
            raise ValueError(f"unknown log level {level!r}")
    native = (
        lib.PYMTP_LOG_DEBUG
        if level <= logging.DEBUG
        else lib.PYMTP_LOG_INFO
        if level <= logging.INFO
        else lib.PYMTP_LOG_WARN
        if level <= logging.WARNING
        else lib.PYMTP_LOG_ERROR
    )
    llama_log.setLevel(level)
    lib.pymtp_log_set(_on_log, native)


def _configure_logging_from_env() -> None:
    wanted = os.environ.get("PYMTP_LOG", "").strip()
    if not wanted:
        set_log_level(None)
        return
    set_log_level(wanted)
    if not logging.getLogger("pymtp").handlers and not logging.getLogger().handlers:
        logging.basicConfig(format="%(name)s %(levelname)s: %(message)s")
    logging.getLogger("pymtp").setLevel(llama_log.level)


_configure_logging_from_env()


def build_info() -> str:
    return str(ffi.string(lib.pymtp_build_info()).decode())


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def system_info() -> str:
    """The CPU model and the features this build uses, in llama.cpp's words, e.g.
    ``AMD EPYC; CPU : SSE3 = 1 | ... | AVX2 = 1 | ... | AVX512 = 1 | ...``: logits depend on
    them to the last bits (which SIMD kernels ran)."""
    return f"{_cpu_model()}; {ffi.string(lib.pymtp_system_info()).decode()}"
