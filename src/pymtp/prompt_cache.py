"""Saved texts: the caches of conversations that are not the live one, in memory or on disk.

A speculator keeps one text live in its contexts. When the next prompt shares more with a
text saved here than with the live one, the live text is saved and the other restored (a
copy of KV bytes, far cheaper than a prefill); when a prompt cuts the live text, the live
text is saved first, so that its conversation can come back. ``PromptCache`` holds the saved
texts of one session, least recently used first out, within a byte budget.

What can be kept of a saved text follows the same rule as for the live one
(``usable_prefix``): attention KV can be cut anywhere; a recurrent state exists only at the
end of the text, or at the end of its prompt where a snapshot was taken (``PromptMark``).
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .mtp_drafter import HeadState

FORMAT = "pymtp-saved-text/1"


@dataclass
class PromptMark:
    """A hybrid model's recurrent state at the end of a prompt (n positions), with the head's
    state there: a later prompt that diverges after it resumes from it."""

    n: int
    recurrent: np.ndarray
    head: HeadState | None


@dataclass
class SavedText:
    """A speculator's text between generations: the target KV holds tokens[:n_past] and
    tokens[-1] is the last token, not yet decoded. drafter: which kind of drafter made the
    head's state (a text is restored only into a speculator with the same kind)."""

    tokens: list[int]
    n_past: int
    target: np.ndarray
    head: HeadState | None
    drafter: str
    mark: PromptMark | None = None
    min_cut: int = 0  # see usable_prefix
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        arrays = [self.target, *_head_arrays(self.head)]
        if self.mark is not None:
            arrays += [self.mark.recurrent, *_head_arrays(self.mark.head)]
        self.nbytes = sum(a.nbytes for a in arrays) + 4 * len(self.tokens)


def _head_arrays(head: HeadState | None) -> list[np.ndarray]:
    if head is None:
        return []
    return [head.kv] + ([head.pending] if head.pending is not None else [])


def usable_prefix(
    tokens: list[int], n_past: int, mark: PromptMark | None, recurrent: bool, prompt: list[int], min_cut: int = 0
) -> tuple[int, str]:
    """How many leading positions of a text's KV (tokens[:n_past]) a new prompt can keep, and
    why not more ("" when all it shares). The prompt's last token is decoded by step().
    min_cut: the fewest positions a cut may keep (sliding-window layers let older positions
    go: a cut before min_cut would decode against missing keys)."""
    limit = min(n_past, len(prompt) - 1)
    n = 0
    while n + 256 <= limit and tokens[n : n + 256] == prompt[n : n + 256]:  # slices compare in C
        n += 256
    while n < limit and tokens[n] == prompt[n]:
        n += 1
    if n < min(n_past, min_cut):
        return 0, (
            f"sliding-window attention: the prompt diverges at {n}, and a cut there needs positions "
            f"the cache let go (it can cut at {min_cut} or later)"
        )
    if n < n_past and recurrent:
        if mark is not None and mark.n <= n:
            return (
                mark.n,
                "" if mark.n == limit else f"recurrent state: resumed at the end of the last prompt ({mark.n})",
            )
        return 0, f"recurrent state: the prompt diverges at {n} of {n_past} cached positions"
    return n, "" if n == limit else f"the prompt diverges from the cached text at position {n}"


class PromptCache:
    """Saved texts of one session, within max_bytes (least recently used out first)."""

    def __init__(self, max_bytes: int, max_texts: int = 64) -> None:
        self.max_bytes = max_bytes
        self.max_texts = max_texts
        self._texts: OrderedDict[int, SavedText] = OrderedDict()
        self._next_id = 0
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._texts)

    def best(self, prompt: list[int], drafter: str, recurrent: bool) -> tuple[int | None, int]:
        """The saved text the prompt can keep most of (its id, or None), and how much."""
        best_id, best_n = None, 0
        for key, text in self._texts.items():
            if text.drafter != drafter:
                continue
            n, _ = usable_prefix(text.tokens, text.n_past, text.mark, recurrent, prompt, text.min_cut)
            if n > best_n:
                best_id, best_n = key, n
        return best_id, best_n

    def take(self, key: int) -> SavedText:
        """Remove a saved text and return it (it becomes the live one)."""
        text = self._texts.pop(key)
        self.nbytes -= text.nbytes
        return text

    def put(self, text: SavedText, recurrent: bool) -> None:
        """Keep a text, dropping the texts it covers (attention KV: its prefixes) and the least
        recently used ones beyond the budget. A text larger than the budget is not kept."""
        if text.nbytes > self.max_bytes or self.max_texts < 1:
            return
        if not recurrent:
            for key in [
                k
                for k, t in self._texts.items()
                if t.drafter == text.drafter
                and t.n_past <= text.n_past
                and t.tokens[: t.n_past] == text.tokens[: t.n_past]
            ]:
                self.take(key)
        self._texts[self._next_id] = text
        self._next_id += 1
        self.nbytes += text.nbytes
        while self.nbytes > self.max_bytes or len(self._texts) > self.max_texts:
            self.take(next(iter(self._texts)))

    def clear(self) -> None:
        self._texts.clear()
        self.nbytes = 0


# ---- files ---------------------------------------------------------------------------------


def write_text(path: str | os.PathLike, text: SavedText, model_facts: dict) -> Path:
    """Write a saved text to a .npz file (numpy arrays and a JSON header; no pickle). A
    hybrid's prompt mark stays behind: the file resumes the text at its end."""
    path = Path(path)
    arrays = {"tokens": np.asarray(text.tokens, dtype=np.int32), "target": text.target}
    head = {}
    if text.head is not None:
        arrays["head_kv"] = text.head.kv
        if text.head.pending is not None:
            arrays["head_pending"] = text.head.pending
        head = {"kv_end": text.head.kv_end}
    meta = {
        "format": FORMAT,
        "model": model_facts,
        "n_past": text.n_past,
        "drafter": text.drafter,
        "head": head,
        "min_cut": text.min_cut,
    }
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub types the first **kwds as allow_pickle
    os.replace(tmp, path)
    return path


def read_text(path: str | os.PathLike, model_facts: dict, n_ctx: int) -> SavedText:
    """A saved text from write_text(), checked against the model and context it will go into
    before llama.cpp sees any of its bytes."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(arrays["meta"].tobytes())
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not a pymtp saved text: {e}") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path} is not a pymtp saved text (format {meta.get('format')!r}, expected {FORMAT!r})")
    if meta.get("model") != model_facts:
        raise ValueError(f"{path} was saved with another model: {meta.get('model')} (this one: {model_facts})")
    tokens = [int(t) for t in arrays["tokens"]]
    n_past = int(meta["n_past"])
    if not 0 < n_past == len(tokens) - 1 or n_past >= n_ctx:
        raise ValueError(f"{path}: {n_past} cached positions do not fit this context (n_ctx={n_ctx})")
    if any(t < 0 or t >= model_facts["n_vocab"] for t in tokens):
        raise ValueError(f"{path}: a token id is outside the vocabulary")
    head = None
    if "head_kv" in arrays:
        pending = arrays.get("head_pending")
        if pending is not None and pending.shape != (model_facts["n_embd"],):
            raise ValueError(f"{path}: the head's pending row has shape {pending.shape}")
        head = HeadState(arrays["head_kv"], int(meta["head"]["kv_end"]), pending)
        if not 0 <= head.kv_end <= n_past + 1:
            raise ValueError(f"{path}: the head reaches position {head.kv_end} of a {n_past}-position text")
    return SavedText(
        tokens,
        n_past,
        arrays["target"],
        head,
        str(meta["drafter"]),
        None,
        min(n_past, max(0, int(meta.get("min_cut", n_past)))),
    )
