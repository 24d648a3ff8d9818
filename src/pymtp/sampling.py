"""Choosing tokens, and the rules that accept or reject drafted tokens.

One transform turns a logits row into the distribution tokens are drawn from (logit bias;
repetition, presence and frequency penalties; temperature, top-k, top-p, min-p, in that
order). Plain sampling draws from it; speculative sampling compares the target's and the
head's distributions under that same transform, which is what makes it lossless:

* greedy: accept the longest prefix where the target's argmax equals the
  draft, then emit the target's own token there (or the bonus token after a
  full accept);
* stochastic: accept draft d with probability min(1, p(d) / q(d)); on a
  rejection draw from normalize(max(0, p - q)); after a full accept draw the
  bonus token from p. The emitted tokens are then distributed exactly as
  plain sampling from p (Leviathan et al. 2023, Chen et al. 2023).

The policy is here: the settings, the seeded RNG (numpy's, so a seed gives the same plain
sampling as before the arithmetic moved to C), which slot holds which draft position. The
arithmetic over each row is native (pymtp_sampler_* in native/shim/sampler.cpp): one call per
draft token, one per verify batch. A draft's q distributions live in the native sampler's
slots, slot i for draft position i; drafters fill them through ``row`` (a Draft says where its
q is: pymtp.drafter.Draft.q). ``verify`` returns a Verdict: the accepted count, the emitted
token, and the probabilities and top tokens asked for.

Constrained decoding (a TokenConstraint: a JSON schema, a grammar, your own) masks every
row on both sides: the head's q at each draft token and the target's p at each verify row,
each with the constraint's state after the tokens before it. The constraint's state during a
step is a ConstraintState (pymtp.constraint_state), which the engine advances while drafting
and settles after the verify; the sampler only applies the masks it is given. Masked p and q
under the same rule keep speculation exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

import numpy as np

from ._native import check, ffi, lib
from .config import SamplingConfig


class TokenConstraint(Protocol):
    """What constrained decoding asks of a constraint (pymtp.grammar builds them from JSON
    schemas and grammars; any object with these methods works).

    * ``fill_mask(out)``: the tokens allowed next, as a packed bitmask into ``out`` (uint32 or
      int32, ceil(n_vocab / 32) words; bit j % 32 of word j // 32 set = token j allowed);
    * ``accept(token) -> bool``: advance by one token (False: not allowed, state unchanged);
    * ``rollback(n)``: undo the last n accepted tokens;
    * ``is_terminated() -> bool``: nothing more may follow (the output is complete).
    """

    def fill_mask(self, out: np.ndarray) -> None: ...
    def accept(self, token: int) -> bool: ...
    def rollback(self, n: int) -> None: ...
    def is_terminated(self) -> bool: ...


#: logits_processor(token_ids, row) -> row: the text so far (prompt, accepted and drafted tokens)
#: and one logits row (a float32 copy it may change in place); returns the row to sample from.
LogitsProcessor = Callable[[list[int], np.ndarray], np.ndarray]


def mask_allows(mask: np.ndarray, token: int) -> bool:
    return bool((int(mask[token >> 5]) >> (token & 31)) & 1)


def mask_refuse(mask: np.ndarray, token: int) -> None:
    """Clear the token's bit in a packed allowed-token mask (32 tokens a uint32 word)."""
    mask[token >> 5] &= ~np.uint32(1 << (token & 31))


#: Draft.q values: each draft token's q sits in the sampler's slot of its position (drafted
#: through Sampler.row), or is a point mass on the token (prompt lookup).
Q_IN_SLOTS = "slots"
Q_POINT_MASS = "point"


class Verdict(NamedTuple):
    """What one verify decided: n_accepted draft tokens, then token (the target's own, or the
    bonus after a full accept); probs: the target's probability of each of those n_accepted + 1
    tokens, top: the likeliest tokens of each of their rows, as (token, log p) (each None
    unless asked for)."""

    n_accepted: int
    token: int
    probs: list[float] | None = None
    top: list[list[tuple[int, float]]] | None = None


class Sampler:
    """Token choice under one SamplingConfig, with its own seeded RNG.

    n_slots: draft positions whose q it can hold, plus one scratch slot. n_vocab sizes the
    native buffers (without it, the first row seen does)."""

    def __init__(self, config: SamplingConfig, n_slots: int = 17, n_vocab: int | None = None) -> None:
        self.n_slots = max(2, n_slots)
        self.n_vocab = 0
        self._native = None
        self._tok = ffi.new("int32_t[1]")
        self._conf = ffi.new("float[1]")
        self._n_acc = ffi.new("int32_t[1]")
        self._probs_out = ffi.new("float[]", self.n_slots + 1)
        self._top_ids = ffi.new("int32_t[20]")
        self._top_lps = ffi.new("float[20]")
        self._top_n = ffi.new("int32_t[1]")
        self._slot_n = ffi.new("int32_t[1]")
        self._slot_ids = ffi.new("int32_t **")
        self._slot_probs = ffi.new("float **")
        self.logits_processor: LogitsProcessor | None = None  # one Python call per row: slower
        self.configure(config)
        if n_vocab:
            self._ensure(n_vocab)

    # ---- settings ------------------------------------------------------------------------------

    def configure(self, config: SamplingConfig, logits_processor: LogitsProcessor | None = None) -> None:
        """Use these settings (and this logits processor, applied to every row first), with a
        fresh RNG from their seed."""
        self.config = config
        self.logits_processor = logits_processor
        self.rng = np.random.default_rng(config.seed)
        # coupled draws: the key of the races, and the text position of the next token drawn
        self._coupled = config.coupled
        self._race_seed = 0
        if self._coupled:
            self._race_seed = (config.seed if config.seed is not None else int(self.rng.integers(2**63))) % 2**64
        self.position = 0
        c = config
        self.penalizes = c.repetition_window > 0 and (
            c.repetition_penalty != 1.0 or c.presence_penalty != 0.0 or c.frequency_penalty != 0.0
        )
        self._window = c.repetition_window if self.penalizes else 0
        self._plain_argmax = c.greedy and not self.penalizes and not c.logit_bias
        if self._native is not None:
            self._push_config()

    @property
    def plain_greedy(self) -> bool:
        """Greedy with nothing that changes the argmax (no penalty, bias or processor; a
        constraint is the caller's to check)."""
        return self._plain_argmax and self.logits_processor is None

    def _ensure(self, n_vocab: int) -> None:
        if self._native is not None and n_vocab == self.n_vocab:
            return
        out = ffi.new("pymtp_sampler **")
        check(lib.pymtp_sampler_create(n_vocab, self.n_slots, out))
        self._native = ffi.gc(out[0], lib.pymtp_sampler_free)
        self.n_vocab = n_vocab
        self._push_config()

    def _push_config(self) -> None:
        c = self.config
        params = ffi.new(
            "pymtp_sampling_params *",
            {
                "temperature": c.temperature,
                "top_k": c.top_k,
                "top_p": c.top_p,
                "min_p": c.min_p,
                "repetition_penalty": c.repetition_penalty,
                "presence_penalty": c.presence_penalty,
                "frequency_penalty": c.frequency_penalty,
                "penalty_window": self._window,
                "coupled": int(self._coupled),
                "seed": self._race_seed,
            },
        )
        ids = np.array([t for t, _ in c.logit_bias], dtype=np.int32)
        vals = np.array([v for _, v in c.logit_bias], dtype=np.float32)
        if ids.size and int(ids.max()) >= self.n_vocab:
            raise ValueError(f"logit_bias names token {int(ids.max())}, outside the vocabulary (0..{self.n_vocab - 1})")
        self._bias = (ids, vals)  # alive while the call reads them
        check(
            lib.pymtp_sampler_configure(
                self._native, params, ffi.from_buffer("int32_t[]", ids), ffi.from_buffer("float[]", vals), ids.size
            )
        )

    # ---- inputs --------------------------------------------------------------------------------

    def _rows(self, rows: np.ndarray) -> np.ndarray:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        self._ensure(rows.shape[-1])
        return rows

    def _history(self, history: Sequence[int], extra: Sequence[int] = ()):
        """The penalty window's tokens as a native array (and its length)."""
        w = self._window
        if not w:
            return ffi.NULL, 0
        tail = list(history[-w:]) + list(extra)
        arr = np.asarray(tail[-w:], dtype=np.int32)
        self._hist = arr  # alive while the call reads it
        return ffi.from_buffer("int32_t[]", arr), arr.size

    def _processed(self, row: np.ndarray, ids: list[int]) -> np.ndarray:
        assert self.logits_processor is not None
        out = self.logits_processor(ids, np.array(row, dtype=np.float32))
        out = np.asarray(out, dtype=np.float32)
        if out.shape != np.shape(row):
            raise ValueError(f"logits_processor returned shape {out.shape}; expected {np.shape(row)}")
        return out

    # ---- one row -------------------------------------------------------------------------------

    def row(
        self,
        slot: int,
        row: np.ndarray,
        history: Sequence[int],
        extra: Sequence[int] = (),
        draw: bool = True,
        confidence: bool = True,
        mask: np.ndarray | None = None,
    ) -> tuple[int, float]:
        """Slot `slot` = the distribution of one logits row, after history + extra (and only the
        tokens mask allows: a packed uint32 bitmask). Returns the chosen token (greedy: the
        argmax; sampling: a draw, or -1 with draw=False; -1 too when nothing allowed has a finite
        logit) and the largest probability (greedy: the argmax's softmax probability; 0.0 with
        confidence=False, which spares greedy rows a pass over the vocabulary)."""
        if self.logits_processor is not None:
            row = self._processed(row, list(history) + list(extra))
        row = self._rows(row)
        hist, n_hist = self._history(history, extra)
        sampled = draw and not self.config.greedy
        # coupled: the race at this token's text position, no RNG state consumed
        u = (0.0 if self._coupled else self.rng.random()) if sampled else -1.0
        check(
            lib.pymtp_sampler_row(
                self._native,
                slot,
                ffi.from_buffer("float[]", row),
                hist,
                n_hist,
                _mask_ptr(mask, self.n_vocab),
                u,
                self.position + len(extra),
                self._tok,
                self._conf if confidence else ffi.NULL,
            )
        )
        tok = int(self._tok[0])
        return tok, float(self._conf[0]) if confidence else 0.0

    def slot_probs(self, slot: int) -> np.ndarray:
        """A slot's distribution over the whole vocabulary (float64, a copy)."""
        check(lib.pymtp_sampler_slot(self._native, slot, self._slot_n, self._slot_ids, self._slot_probs))
        n = int(self._slot_n[0])
        probs = np.frombuffer(ffi.buffer(self._slot_probs[0], 4 * n), dtype=np.float32)
        out = np.zeros(self.n_vocab, dtype=np.float64)
        if self._slot_ids[0] == ffi.NULL:
            out[:n] = probs
        else:
            out[np.frombuffer(ffi.buffer(self._slot_ids[0], 4 * n), dtype=np.int32)] = probs
        return out

    def probs(self, row: np.ndarray, history: Sequence[int], mask: np.ndarray | None = None) -> np.ndarray:
        """The distribution a token is drawn from after history (float64, sums to 1)."""
        scratch = self.n_slots - 1
        self.row(scratch, row, history, draw=False, confidence=False, mask=mask)
        return self.slot_probs(scratch)

    def choose(self, row: np.ndarray, history: Sequence[int], mask: np.ndarray | None = None) -> int:
        """The next token from one logits row (plain decoding): the text moves on one position."""
        tok = self.row(self.n_slots - 1, row, history, confidence=False, mask=mask)[0]
        self.position += 1
        return tok

    def _point_masses(self, tokens: Sequence[int]) -> None:
        """q of draft position i = a point mass on tokens[i] (prompt lookup's drafts)."""
        for i, t in enumerate(tokens):
            check(lib.pymtp_sampler_set_point(self._native, i, int(t)))

    def _load_q(self, draft_probs: Sequence[np.ndarray]) -> None:
        for i, q in enumerate(draft_probs):
            q = np.ascontiguousarray(q, dtype=np.float32)
            if q.shape != (self.n_vocab,):
                raise ValueError(f"draft q {i} has shape {q.shape}; expected ({self.n_vocab},)")
            check(lib.pymtp_sampler_set_dense(self._native, i, ffi.from_buffer("float[]", q)))

    # ---- verification ---------------------------------------------------------------------------

    def verify(
        self,
        target_rows: np.ndarray,
        draft: Sequence[int],
        q: str | Sequence[np.ndarray] | None,
        history: list[int],
        *,
        masks: np.ndarray | None = None,
        probs: bool = False,
        top: int = 0,
    ) -> Verdict:
        """Accept a prefix of draft against the target rows of one verify batch.

        target_rows[i] is the target's logits after history + draft[:i] (k + 1 rows for k
        drafted tokens). Sampling mode reads each draft token's q, the distribution it was drawn
        from: q is Q_IN_SLOTS (or None) when this sampler's slots hold them (drafted through
        ``row``), Q_POINT_MASS for point masses on the drafted tokens, or a list of
        vocabulary-sized arrays. masks: row i's allowed tokens (k + 1 packed bitmasks; None:
        all). probs / top: the Verdict also carries the target's probability of each token it
        keeps and emits, and the top likeliest tokens of their rows."""
        k = len(draft)
        if k >= self.n_slots:
            raise ValueError(f"a draft of {k} tokens; this sampler holds q for {self.n_slots - 1}")
        if not isinstance(top, int) or not 0 <= top <= 20:
            raise ValueError(f"top must be an int in [0, 20], got {top!r}")
        rows = target_rows[: k + 1]
        if self.logits_processor is not None:
            rows = np.stack([self._processed(rows[i], list(history) + list(draft[:i])) for i in range(len(rows))])
        rows = self._rows(rows)
        if rows.shape[0] != k + 1:
            raise ValueError(f"{k} draft tokens need {k + 1} target rows, got {rows.shape[0]}")
        if masks is not None and (
            masks.dtype != np.uint32
            or masks.shape[0] < k + 1
            or not masks.flags.c_contiguous
            or masks.shape[1] != (self.n_vocab + 31) // 32
        ):
            raise ValueError(f"masks: need {k + 1} C-contiguous uint32 rows of {(self.n_vocab + 31) // 32} words")
        u = ffi.NULL
        if not self.config.greedy and not self._coupled:  # coupled verify reads no q
            if q == Q_POINT_MASS:
                self._point_masses(draft)
            elif q is not None and not isinstance(q, str):  # Q_IN_SLOTS: the drafter filled them
                self._load_q(q)
            self._u = self.rng.random(k + 1)
            u = ffi.from_buffer("double[]", self._u)
        tokens = np.asarray(draft, dtype=np.int32)
        hist, n_hist = self._history(history)
        mask_ptr = ffi.NULL if masks is None else ffi.from_buffer("uint32_t[]", masks)
        check(
            lib.pymtp_sampler_verify(
                self._native,
                ffi.from_buffer("float[]", rows),
                ffi.from_buffer("int32_t[]", tokens),
                k,
                hist,
                n_hist,
                mask_ptr,
                u,
                self.position,
                self._n_acc,
                self._tok,
                self._probs_out if probs or top else ffi.NULL,
            )
        )
        n_acc, new = int(self._n_acc[0]), int(self._tok[0])
        self.position += n_acc + 1
        return Verdict(
            n_acc,
            new,
            list(self._probs_out[0 : n_acc + 1]) if probs or top else None,
            [self._top(rows[i], history, draft[:i], None if masks is None else masks[i], top) for i in range(n_acc + 1)]
            if top
            else None,
        )  # one native call per emitted token

    def _top(
        self, row: np.ndarray, history: Sequence[int], extra: Sequence[int], mask: np.ndarray | None, n: int
    ) -> list[tuple[int, float]]:
        hist, n_hist = self._history(history, extra)
        check(
            lib.pymtp_sampler_top(
                self._native,
                ffi.from_buffer("float[]", row),
                hist,
                n_hist,
                ffi.NULL if mask is None else ffi.from_buffer("uint32_t[]", mask),
                n,
                self._top_ids,
                self._top_lps,
                self._top_n,
            )
        )
        return [(int(self._top_ids[j]), float(self._top_lps[j])) for j in range(self._top_n[0])]


def _mask_ptr(mask: np.ndarray | None, n_vocab: int):
    """A packed bitmask as the native calls take it (NULL: every token allowed)."""
    if mask is None:
        return ffi.NULL
    if mask.dtype not in (np.uint32, np.int32) or mask.size != (n_vocab + 31) // 32 or not mask.flags.c_contiguous:
        raise ValueError(f"a mask is {(n_vocab + 31) // 32} C-contiguous uint32 words")
    return ffi.from_buffer("uint32_t[]", mask)
