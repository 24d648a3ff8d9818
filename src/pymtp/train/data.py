"""Corpus (the running interpreter's stdlib sources), held-out split and BPE tokenizer.

Only the tokenizer training needs the HF ``tokenizers`` package; the split and
corpus helpers are plain Python.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from pathlib import Path

import numpy as np

SPECIAL = "<|endoftext|>"  # id 0: BOS = EOS = document separator (control token)
EXCLUDED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
HELDOUT_MOD = 20  # 1 file in 20 (by hash of the relative path) is held out


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def list_files(root: Path | None = None) -> list[str]:
    """Relative paths of the stdlib *.py files (test dirs and site-packages excluded), sorted."""
    root = root or stdlib_root()
    out = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in EXCLUDED_DIRS and not d.startswith("lib-dynload"))
        for f in files:
            if f.endswith(".py"):
                out.append(os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/"))
    return sorted(out)


def is_heldout(rel: str) -> bool:
    h = int(hashlib.sha256(rel.encode()).hexdigest()[:8], 16)
    return h % HELDOUT_MOD == 0


def split_files(root: Path | None = None) -> tuple[list[str], list[str]]:
    files = list_files(root)
    return [f for f in files if not is_heldout(f)], [f for f in files if is_heldout(f)]


def read_text(rel: str, root: Path | None = None) -> str | None:
    root = root or stdlib_root()
    try:
        return (root / rel).read_bytes().decode("utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def train_tokenizer(texts: list[str], vocab_size: int = 4096):
    """Byte-level BPE (GPT-2 pre-tokenizer regex), special token <|endoftext|> = id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[SPECIAL],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def vocab_from_tokenizer_json(tok_json: str) -> tuple[list[str], list[str]]:
    """(tokens by id, merges as 'a b' strings) from a tokenizers JSON dump."""
    d = json.loads(tok_json)
    vocab = d["model"]["vocab"]
    tokens: list = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    for a in d.get("added_tokens", []):
        if a["id"] >= len(tokens):
            tokens.extend([None] * (a["id"] + 1 - len(tokens)))
        tokens[a["id"]] = a["content"]
    assert all(t is not None for t in tokens)
    merges = [m if isinstance(m, str) else " ".join(m) for m in d["model"]["merges"]]
    return tokens, merges


def encode_stream(tok, texts: list[str]) -> np.ndarray:
    """<|endoftext|> text <|endoftext|> text ... as one uint16 token stream."""
    sep = tok.token_to_id(SPECIAL)
    encs = tok.encode_batch(texts, add_special_tokens=False)
    parts = []
    for e in encs:
        parts.append(np.array([sep], dtype=np.uint16))
        parts.append(np.asarray(e.ids, dtype=np.uint16))
    return np.concatenate(parts)
