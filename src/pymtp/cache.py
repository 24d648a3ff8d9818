"""pymtp's cache folder and atomic cached files.

The folder is the one the native build uses for llama.cpp's source: $PYMTP_CACHE_DIR, else
$XDG_CACHE_HOME/pymtp, else ~/.cache/pymtp (native/cmake/LlamaSource.cmake).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_dir(sub: str = "") -> Path:
    """The cache folder (or its sub-folder); not created here."""
    if os.environ.get("PYMTP_CACHE_DIR"):
        base = Path(os.environ["PYMTP_CACHE_DIR"])
    elif os.environ.get("XDG_CACHE_HOME"):
        base = Path(os.environ["XDG_CACHE_HOME"]) / "pymtp"
    else:
        base = Path.home() / ".cache" / "pymtp"
    return base / sub if sub else base


def cached_file(path: Path, write: Callable[[Path], object]) -> Path:
    """path, made by write(tmp) on first use: written beside it and renamed into place, so
    concurrent processes never see half a file (the last rename wins, with equal bytes)."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
