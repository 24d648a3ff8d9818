"""GGUF files from the Hugging Face Hub: ``pymtp.load("org/repo", file="*Q4_K_M*")``.

Uses ``huggingface_hub`` (``pip install 'pymtp-llm[hub]'``) with its own cache, token and
offline behaviour: ``HF_HOME`` / ``HF_HUB_CACHE`` say where files go, ``HF_TOKEN`` gives
access to gated repositories, ``HF_HUB_OFFLINE=1`` uses only what is cached, and
``HF_ENDPOINT`` names another server (a mirror; the tests use a local one).
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import ModelLoadError

_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


def looks_like_repo(name: str) -> bool:
    """Whether a model argument names a Hub repository ("org/repo"), not a local file."""
    return (
        name.count("/") == 1
        and not name.startswith((".", "/", "~"))
        and not name.endswith(".gguf")
        and not Path(name).exists()
    )


def hub_gguf(repo_id: str, file: str | None = None, revision: str | None = None) -> Path:
    """The local path of a repository's GGUF matching the glob ``file`` (downloaded on first
    use; a split GGUF comes whole, and its first part is returned). Exactly one file (or one
    split set) must match."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError:
        raise ModelLoadError(
            "loading from the Hugging Face Hub needs huggingface_hub: pip install 'pymtp-llm[hub]'"
        ) from None
    pattern = file or "*.gguf"
    if not pattern.endswith(".gguf") and not pattern.endswith("*"):
        pattern += "*"
    try:
        folder = Path(snapshot_download(repo_id, revision=revision, allow_patterns=[pattern]))
    except LocalEntryNotFoundError as e:
        raise ModelLoadError(
            f"{repo_id}: no cached copy of {pattern!r} and the Hub is not reachable "
            f"(HF_HUB_OFFLINE, or no network): {e}"
        ) from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise ModelLoadError(f"{repo_id}: {e}") from None
    found = sorted(p for p in folder.rglob("*.gguf") if p.match(pattern) or p.relative_to(folder).match(pattern))
    firsts = [p for p in found if (m := _SPLIT.search(p.name)) is None or m.group(1) == "00001"]
    if not firsts:
        raise ModelLoadError(f"{repo_id}: no GGUF file matches {pattern!r}")
    if len(firsts) > 1:
        names = ", ".join(str(p.relative_to(folder)) for p in firsts)
        raise ModelLoadError(
            f"{repo_id}: {len(firsts)} GGUF files match {pattern!r} ({names}); give file= a pattern that picks one"
        )
    return firsts[0]
