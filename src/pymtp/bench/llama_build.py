"""llama.cpp's own tools: find the pinned llama.cpp tree pymtp is built from and build
``llama-speculative-simple`` and ``llama-completion`` (the bench), ``llama-server`` (reuse
and serving comparisons) and ``ggml-rpc-server`` (multi-host runs) from it into the cache."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..cache import cache_dir
from .base import BenchError, log

LLAMA_TOOLS = ("llama-speculative-simple", "llama-completion")
OTHER_TOOLS = ("llama-server", "ggml-rpc-server")


def _repo_root() -> Path | None:
    here = Path(__file__).resolve().parents[3]  # src/pymtp/bench/ -> the checkout
    return here if (here / "native" / "cmake" / "LlamaSource.cmake").is_file() else None


def _pinned_commit() -> str | None:
    repo = _repo_root()
    if repo is not None:
        m = re.search(
            r'PYMTP_LLAMA_COMMIT\s+"([0-9a-f]{40})"', (repo / "native" / "cmake" / "LlamaSource.cmake").read_text()
        )
        if m:
            return m.group(1)
    try:
        from .._native import build_info
    except (ImportError, OSError):  # no native library to ask
        return None
    m = re.search(r"\b([0-9a-f]{40})\b", build_info())
    return m.group(1) if m else None


def find_llama_source(explicit: str | os.PathLike | None = None) -> Path:
    """The llama.cpp tree pymtp is built from (same rules as native/cmake/LlamaSource.cmake)."""
    cand = explicit or os.environ.get("PYMTP_LLAMA_SOURCE_DIR")
    if cand:
        p = Path(cand).expanduser()
        if not (p / "CMakeLists.txt").is_file():
            raise BenchError(f"not a llama.cpp tree: {p}")
        return p
    repo = _repo_root()
    if repo is not None and (repo / "native" / "llama.cpp" / "CMakeLists.txt").is_file():
        return repo / "native" / "llama.cpp"
    commit = _pinned_commit()
    cache = cache_dir()
    if commit:
        short = commit[:12]
        if repo is not None:
            patches = sorted((repo / "native" / "patches").glob("*.patch"))
            h = hashlib.sha256("".join(p.read_text() for p in patches).encode()).hexdigest()[:12]
            tree = cache / f"llama.cpp-{short}-p{h}"
            if (tree / ".pymtp-ready").is_file():
                return tree
        trees = sorted(cache.glob(f"llama.cpp-{short}-p*/.pymtp-ready"), key=lambda p: p.stat().st_mtime)
        if trees:
            return trees[-1].parent
    raise BenchError(
        f"no pinned llama.cpp tree found (commit {commit or 'unknown'}; looked in {cache} and the "
        "native/llama.cpp submodule). Build pymtp once (pip install .), which fetches it, or set "
        "PYMTP_LLAMA_SOURCE_DIR / --llama-src, or pass --no-llama-cpp."
    )


def _tools_dir(src: Path) -> Path:
    return cache_dir() / "llama-tools" / src.name / "build"


def cmake_configure_command(src: Path, build: Path) -> list[str]:
    cmd = [shutil.which("cmake") or "cmake", "-S", str(src), "-B", str(build)]
    if shutil.which("ninja"):
        cmd += ["-G", "Ninja"]
    cmd += [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DGGML_NATIVE=ON",
        "-DLLAMA_BUILD_EXAMPLES=ON",
        "-DLLAMA_BUILD_TOOLS=ON",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DGGML_RPC=ON",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        f"-DGGML_CCACHE={'ON' if shutil.which('ccache') else 'OFF'}",
    ]
    return cmd


@contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """Serialize builds of the same tools directory between processes (POSIX)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            log(f"bench: waiting for another build of the llama.cpp tools ({path})")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_llama_tools(
    src: Path | None = None,
    *,
    bin_dir: str | os.PathLike | None = None,
    jobs: int | None = None,
    tools: tuple[str, ...] = LLAMA_TOOLS,
) -> dict[str, Any]:
    """Paths of the tools (default: llama-speculative-simple and llama-completion), building
    them when needed.

    bin_dir: use prebuilt binaries from there instead."""
    if bin_dir is not None:
        bins = {t: Path(bin_dir) / t for t in tools}
        missing = [str(p) for p in bins.values() if not p.is_file()]
        if missing:
            raise BenchError(f"llama.cpp tools missing: {', '.join(missing)}")
        return {"source": None, "build_dir": None, "bins": {k: str(v) for k, v in bins.items()}, "built": False}
    src = find_llama_source(src)
    build = _tools_dir(src)
    bins = {t: build / "bin" / t for t in tools}
    log_path = build.parent / "build.log"
    build.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    configure = cmake_configure_command(src, build)
    stamp = build / "pymtp-configure.txt"  # configured with these options (else again)
    with _build_lock(build.parent / ".lock"), open(log_path, "a") as f:
        if not (build / "CMakeCache.txt").is_file() or not stamp.is_file() or stamp.read_text() != repr(configure):
            log(f"bench: configuring llama.cpp tools in {build} (log: {log_path})")
            r = subprocess.run(configure, stdout=f, stderr=subprocess.STDOUT)
            if r.returncode != 0:
                raise BenchError(f"configuring llama.cpp tools failed; see {log_path}")
            stamp.write_text(repr(configure))
        if not all(p.is_file() for p in bins.values()):
            log(f"bench: building {', '.join(tools)} from {src} (several minutes; log: {log_path})")
        cmd = [
            shutil.which("cmake") or "cmake",
            "--build",
            str(build),
            "--target",
            *tools,
            "-j",
            str(jobs or os.cpu_count() or 2),
        ]
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise BenchError(f"building llama.cpp tools failed; see {log_path}")
    return {
        "source": str(src),
        "build_dir": str(build),
        "bins": {k: str(v) for k, v in bins.items()},
        "build_s": round(time.perf_counter() - t0, 1),
        "configure": cmake_configure_command(src, build),
    }
