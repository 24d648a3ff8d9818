"""Which tokens a trimmed draft vocabulary keeps: the N most frequent in a calibration text.

The MTP head's projection onto the whole vocabulary is most of a draft token's cost (FastMTP
trims it; ``SpecConfig(draft_vocab=N)``, ``pymtp.model.DraftContext.set_vocab``). Drafts
then come only from these N tokens: rejection sampling stays exact (q is zero elsewhere and
the residual covers the rest), and greedy verification decides every token anyway. A token
outside the set costs acceptance only.

The calibration text is this interpreter's own Python standard library (code, docstrings and
comments): it is on every machine, offline, large, fixed, and close to what the default
model's head was trained on (standard-library code and chat the trunk wrote). Counts are
cached per model file. End-of-generation tokens are always kept, so that a draft can end a
reply.
"""

from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path

import numpy as np

from .cache import cache_dir, cached_file

#: Bytes of standard-library source tokenized for the counts (about 1.5M tokens).
CALIBRATION_BYTES = 6_000_000
_COUNTS_VERSION = 1


def calibration_files() -> list[Path]:
    """The standard library's top-level modules, in name order (the calibration text)."""
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def _model_key(model) -> str:
    st = model.path.stat()
    ident = f"{model.path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{model.n_vocab}|{_COUNTS_VERSION}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def token_counts(model) -> np.ndarray:
    """How often each token occurs in the calibration text (cached per model file)."""
    path = cache_dir("draft-vocab") / f"{model.path.stem}-{_model_key(model)}.npy"

    def write(tmp: Path) -> None:
        counts = np.zeros(model.n_vocab, dtype=np.int64)
        budget = CALIBRATION_BYTES
        for f in calibration_files():
            if budget <= 0:
                break
            text = f.read_text(encoding="utf-8", errors="replace")[:budget]
            budget -= len(text)
            counts += np.bincount(model.tokenize(text, add_special=False), minlength=model.n_vocab)
        with open(tmp, "wb") as out:
            np.save(out, counts)

    return np.load(cached_file(path, write))


def frequent_tokens(model, n: int) -> np.ndarray:
    """The n most frequent calibration tokens (ties: lower id) plus the end-of-generation
    tokens, as ascending ids; the whole vocabulary when n >= n_vocab."""
    if n >= model.n_vocab:
        return np.arange(model.n_vocab, dtype=np.int32)
    counts = token_counts(model)
    top = np.argsort(-counts, kind="stable")[:n]
    eog = [t for t in (model.eos, model.eot) if t is not None]
    return np.unique(np.concatenate([top, np.asarray(eog, dtype=np.int64)])).astype(np.int32)
