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

The default model (any file with its tokenizer: F16, Q4_1, another head) ranks by a shipped
list instead (``models/smollm2-135m-draft-vocab.npz``, python -m pymtp.train.vocab_rank): the
distillation corpus's counts mixed with these, which raises its acceptance on chat and prose
without costing code (docs/guides/training.md, "Draft vocabulary"). Past the list's end, and
for every other model, the standard-library counts rank.
"""

from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path

import numpy as np

from .cache import cache_dir, cached_file

#: The default model's ranking: ``ids`` (int32, most frequent first) for the tokenizer whose
#: vocabulary_hash is ``vocab_hash``; ``n_vocab`` and ``probe_hash`` (a few tokens' bytes) rule another
#: tokenizer out without hashing every token.
SHIPPED = Path(__file__).resolve().parent / "models" / "smollm2-135m-draft-vocab.npz"
SHIPPED_LEN = 12_288  # ids shipped (48 KB); larger draft vocabularies go on with stdlib counts

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


_hashes: dict[str, str] = {}


def vocabulary_hash(model) -> str:
    """A hash of the model's tokenizer: every token's bytes, in id order (cached per file)."""
    key = _model_key(model)
    if key not in _hashes:
        _hashes[key] = _hash_tokens(model, range(model.n_vocab))
    return _hashes[key]


def _hash_tokens(model, ids) -> str:
    """sha256 of the vocabulary size and these tokens' bytes (each after its length), shortened."""
    h = hashlib.sha256(str(model.n_vocab).encode())
    for t in ids:
        piece = model.token_bytes(t, render_special=True)
        h.update(len(piece).to_bytes(2, "little") + piece)
    return h.hexdigest()[:32]


#: Tokens whose bytes probe_hash hashes: spread over the vocabulary, so that two tokenizers
#: of one size that differ anywhere much will almost surely differ in one of them.
PROBE_TOKENS = 32


def probe_hash(model) -> str:
    """A hash of PROBE_TOKENS tokens' bytes, evenly spaced over the vocabulary: tells most
    other tokenizers of the same size apart without vocabulary_hash's pass over every token."""
    return _hash_tokens(model, np.unique(np.linspace(0, model.n_vocab - 1, PROBE_TOKENS).astype(np.int64)).tolist())


def _same_tokenizer(model, z) -> bool:
    """Whether the shipped list was made for this model's tokenizer: the cheap fields first (a
    list written before they existed goes straight to the full hash)."""
    if "n_vocab" in z.files and int(z["n_vocab"]) != model.n_vocab:
        return False
    if "probe_hash" in z.files and str(z["probe_hash"]) != probe_hash(model):
        return False
    return str(z["vocab_hash"]) == vocabulary_hash(model)


def shipped_ranking(model) -> np.ndarray | None:
    """The shipped ranking when the model has the default model's tokenizer, else None."""
    if not SHIPPED.is_file():
        return None
    with np.load(SHIPPED) as z:
        if not _same_tokenizer(model, z):
            return None
        ids = z["ids"].astype(np.int64)
    if ids.size == 0 or ids.min() < 0 or ids.max() >= model.n_vocab or np.unique(ids).size != ids.size:
        raise ValueError(f"{SHIPPED} is corrupt: its ids must be unique and below n_vocab {model.n_vocab}")
    return ids


def write_shipped(model, ranking: np.ndarray, *, mix: float, path: Path = SHIPPED) -> Path:
    """Save a ranking (most frequent first) as the shipped list for this model's tokenizer."""
    np.savez_compressed(
        path,
        ids=np.asarray(ranking, np.int32),
        vocab_hash=np.asarray(vocabulary_hash(model)),
        n_vocab=np.asarray(model.n_vocab, np.int64),
        probe_hash=np.asarray(probe_hash(model)),
        mix=np.asarray(mix),
    )
    return path


def ranking(model) -> np.ndarray:
    """Every token id, most frequent first: the shipped list for the default model's tokenizer,
    then (and for every other model, alone) the calibration counts (ties: lower id)."""
    by_counts = np.argsort(-token_counts(model), kind="stable")
    shipped = shipped_ranking(model)
    if shipped is None:
        return by_counts
    return np.concatenate([shipped, by_counts[~np.isin(by_counts, shipped)]])


def frequent_tokens(model, n: int) -> np.ndarray:
    """The n first tokens of ranking(model) plus the end-of-generation tokens, as ascending
    ids; the whole vocabulary when n >= n_vocab."""
    if n >= model.n_vocab:
        return np.arange(model.n_vocab, dtype=np.int32)
    top = ranking(model)[:n]
    eog = [t for t in (model.eos, model.eot) if t is not None]
    return np.unique(np.concatenate([top, np.asarray(eog, dtype=np.int64)])).astype(np.int32)
