"""The contexts over a loaded Model: TargetContext (the trunk and its KV) and DraftContext
(the MTP head's), with the decode, cache-editing and state calls they share (_Context).

Lifetimes: ``logits()`` and ``hidden()`` return numpy views of llama.cpp's
output buffers. A view is valid only until the next decode, seq_rm or close on
its context (llama.cpp may reuse or reallocate the buffer); copy the rows you
keep (``.copy()``; a hidden row is a few KB).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._native import check, ffi, lib
from .errors import InvalidHandleError, UnsupportedError

if TYPE_CHECKING:
    from typing_extensions import Self

    from .model import Model

_F32 = np.dtype(np.float32)


#: Token ids: a sequence of ints or an int array (one dimension).
Tokens = Iterable[int] | np.ndarray
#: Per-row output flags of a decode (logits wanted for that row).
Flags = Sequence[bool] | Sequence[int] | np.ndarray


def _as_tokens(tokens: Tokens) -> np.ndarray:
    try:
        arr = np.ascontiguousarray(tokens, dtype=np.int32)
    except (OverflowError, ValueError, TypeError) as e:
        raise ValueError(f"tokens must be integers in the int32 range: {e}") from None
    if arr.ndim != 1:
        raise ValueError(f"tokens must be one-dimensional, got shape {arr.shape}")
    return arr


def _view(ptr: Any, n_rows: int, n_cols: int) -> np.ndarray:
    arr = np.frombuffer(ffi.buffer(ptr, n_rows * n_cols * 4), dtype=_F32).reshape(n_rows, n_cols)
    arr.flags.writeable = False
    return arr


def last_row_only(n: int) -> np.ndarray:
    """Output flags for a decode of n tokens that needs logits of the last row only."""
    out = np.zeros(n, dtype=np.uint8)
    out[-1] = 1
    return out


def max_ubatch() -> int:
    """$PYMTP_MAX_UBATCH: the most rows llama.cpp computes in one pass (0, unset: n_batch).
    8 makes every decode, prefills included, go through the CPU kernels whose bits do not
    depend on the batch (patches 0004, 0005), so a row's bits do not depend on the cache state
    either (a prompt taken from the cache, or decoded again); prefills then run in pieces of 8
    rows (docs/design/exactness.md)."""
    env = os.environ.get("PYMTP_MAX_UBATCH")
    if not env:
        return 0
    try:
        n = int(env)
    except ValueError:
        raise ValueError(f"PYMTP_MAX_UBATCH must be a non-negative int, got {env!r}") from None
    if n < 0:
        raise ValueError(f"PYMTP_MAX_UBATCH must be a non-negative int, got {env!r}")
    return n


def default_threads() -> int:
    """Threads a context decodes with when none are given: $PYMTP_THREADS, else one less than
    the physical cores this process may use (at least 1). Measured on 2 cores
    (tools/measure_threads.py, README "Threads"): both cores decode 14% faster on an idle
    machine, but 2.7x slower beside one busy process, as ggml's threads spin on a preempted peer."""
    env = os.environ.get("PYMTP_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"PYMTP_THREADS must be a positive int, got {env!r}") from None
        if n < 1:
            raise ValueError(f"PYMTP_THREADS must be a positive int, got {env!r}")
        return n
    try:
        logical = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        logical = os.cpu_count() or 1
    try:  # two hardware threads per core share its units: count cores
        smt = open("/sys/devices/system/cpu/smt/active").read().strip() == "1"
    except OSError:
        smt = False
    cores = max(1, logical // 2 if smt else logical)
    return max(1, cores - 1)


def _new_handle(ctype: str, create: Callable[..., int], *args: Any) -> Any:
    """A native handle: ``create(*args, out)`` fills the ``ctype`` out-pointer; errors raise."""
    out = ffi.new(ctype)
    check(create(*args, out))
    return out[0]


class _Context:
    """State shared by target and draft contexts: a llama_context with its KV."""

    is_draft = False

    def __init__(self, model: Model) -> None:
        from .model import Model  # model.py imports this module

        if not isinstance(model, Model):
            model = getattr(model, "model", model)  # a Session: its model
        if not isinstance(model, Model):
            raise TypeError(f"a context needs a Model or a Session, got {type(model).__name__}")
        self.model = model
        self.lock = model.lock
        self.n_writes = 0  # decodes and cuts so far: a cache's owner sees foreign writes
        self._seq_writes: dict[int, int] = {}  # ... and per sequence (texts sharing the context)
        self._h = None
        self._n_rows_out = ffi.new("int32_t *")
        self._ptr_out = ffi.new("float **")

    #: A context used whole is the handle of its sequence 0: the engine addresses any handle
    #: (a context, or a pymtp.seqview view of one sequence) as (handle.ctx, handle.seq_id).
    seq_id = 0

    @property
    def ctx(self) -> Self:
        return self

    def write_count(self, seq_id: int | None = None) -> int:
        """Writes (decodes, cuts, state loads) to the whole context, or to one sequence."""
        return self.n_writes if seq_id is None else self._seq_writes.get(seq_id, 0)

    def _wrote(self, seq_id: int) -> None:
        self.n_writes += 1
        self._seq_writes[seq_id] = self._seq_writes.get(seq_id, 0) + 1

    def _init_info(self) -> None:
        info = ffi.new("pymtp_ctx_info *")
        check(lib.pymtp_ctx_get_info(self._h, info))
        self.n_ctx: int = info.n_ctx
        self.n_batch: int = info.n_batch
        self.n_rs_seq: int = info.n_rs_seq
        self.n_vocab: int = info.n_vocab
        self.n_embd: int = info.n_embd
        self.model._contexts.add(self)

    @staticmethod
    def _params(n_ctx: int, n_batch: int, n_rs_seq: int, n_threads: int | None, n_seq_max: int) -> Any:
        p = ffi.new("pymtp_ctx_params *")
        p[0] = lib.pymtp_ctx_default_params()
        for name, value in (("n_ctx", n_ctx), ("n_batch", n_batch), ("n_rs_seq", n_rs_seq), ("n_seq_max", n_seq_max)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if n_batch < 1:
            raise ValueError("n_batch must be at least 1")
        p.n_ctx, p.n_batch, p.n_rs_seq, p.n_seq_max = n_ctx, n_batch, n_rs_seq, n_seq_max
        cap = max_ubatch()
        # not with recurrent snapshots: llama.cpp keeps them per decode and aborts when one is
        # split into several ubatches
        p.n_ubatch = min(n_batch, cap) if cap and not n_rs_seq else 0
        p.n_threads = p.n_threads_batch = n_threads or default_threads()
        return p

    def _handle(self) -> Any:
        if self._h is None:
            raise InvalidHandleError(f"{type(self).__name__} is closed")
        return self._h

    @property
    def closed(self) -> bool:
        return self._h is None

    def close(self) -> None:
        with self.lock:
            if self._h is None:
                return
            self._close_children()
            check(lib.pymtp_ctx_free(self._h))
            self._h = None

    def _close_children(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ---- rows of the last decode (views: valid until the next decode) ----------------

    def logits(self) -> np.ndarray:
        """Logits of the rows asked for in the last decode: (rows, n_vocab), a view."""
        with self.lock:
            check(lib.pymtp_logits(self._handle(), self._ptr_out, self._n_rows_out))
            return _view(self._ptr_out[0], self._n_rows_out[0], self.n_vocab)

    def hidden(self) -> np.ndarray:
        """Hidden rows the MTP head consumes: (rows, n_embd), a view."""
        with self.lock:
            check(lib.pymtp_hidden(self._handle(), self._ptr_out, self._n_rows_out))
            return _view(self._ptr_out[0], self._n_rows_out[0], self.n_embd)

    # ---- memory -------------------------------------------------------------------------

    def seq_rm(self, p0: int, p1: int = -1, *, seq_id: int = 0) -> None:
        """Forget positions [p0, p1) of a sequence (p1 = -1: to the end)."""
        with self.lock:
            self._wrote(seq_id)
            check(lib.pymtp_seq_rm(self._handle(), seq_id, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        with self.lock:
            self._wrote(dst)
            check(lib.pymtp_seq_cp(self._handle(), src, dst, p0, p1))

    def pos_max(self, seq_id: int = 0) -> int:
        """Last position held for the sequence, -1 when empty."""
        return self._pos(lib.pymtp_seq_pos_max, seq_id)

    def _pos(self, fn: Callable[..., int], seq_id: int) -> int:
        out = ffi.new("int32_t *")
        with self.lock:
            check(fn(self._handle(), seq_id, out))
        return int(out[0])

    def get_state(self, seq_id: int = 0, *, partial: bool = False) -> np.ndarray:
        """A copy of a sequence's memory as bytes (partial: only a hybrid's recurrent state)."""
        size = ffi.new("size_t *")
        with self.lock:
            check(lib.pymtp_state_size(self._handle(), seq_id, int(partial), size))
            buf = np.empty(size[0], dtype=np.uint8)
            check(
                lib.pymtp_state_get(
                    self._handle(), seq_id, int(partial), ffi.from_buffer("uint8_t[]", buf), buf.nbytes, size
                )
            )
        return buf[: size[0]]

    def set_state(self, state: np.ndarray, seq_id: int = 0, *, partial: bool = False) -> None:
        """Replace a sequence's memory with bytes from get_state() of the same model and kind
        of context."""
        buf = np.ascontiguousarray(state, dtype=np.uint8)
        with self.lock:
            self._wrote(seq_id)
            check(
                lib.pymtp_state_set(self._handle(), seq_id, int(partial), ffi.from_buffer("uint8_t[]", buf), buf.nbytes)
            )

    def pos_min(self, seq_id: int = 0) -> int:
        """First position held for the sequence (sliding-window layers drop older ones), -1 when empty."""
        return self._pos(lib.pymtp_seq_pos_min, seq_id)

    def min_cut(self) -> int:
        """The fewest positions a cut of sequence 0 may keep and still decode correctly after:
        sliding-window layers need the n_swa positions before the next one (0: any cut)."""
        n_swa = self.model.n_swa
        lo = self.pos_min() if n_swa else 0
        return lo + n_swa if lo > 0 else 0

    def set_threads(self, n_threads: int, n_threads_batch: int | None = None) -> None:
        with self.lock:
            check(lib.pymtp_ctx_set_threads(self._handle(), n_threads, n_threads_batch or n_threads))
        self.n_threads = n_threads

    def decode_rows(
        self,
        tokens: Tokens,
        pos: Sequence[int] | np.ndarray,
        seq_ids: Sequence[int] | np.ndarray,
        *,
        output: Flags | None = None,
        hidden: np.ndarray | None = None,
    ) -> None:
        """Decode rows of several sequences in one batch: row i is tokens[i] of sequence
        seq_ids[i] at position pos[i] (each sequence continuing where it ends, in order).
        output: per-row logits flags (None = all); hidden (draft contexts): one target hidden
        row per row, float32 (n_rows, n_embd). Logits and hidden rows come back in batch order."""
        arr = _as_tokens(tokens)
        pos_arr = np.ascontiguousarray(pos, dtype=np.int32)
        seq_arr = np.ascontiguousarray(seq_ids, dtype=np.int32)
        if pos_arr.shape != arr.shape or seq_arr.shape != arr.shape:
            raise ValueError(
                f"tokens, pos and seq_ids must have the same length: {arr.shape}, {pos_arr.shape}, {seq_arr.shape}"
            )
        out_ptr = ffi.NULL
        if output is not None:
            flags = np.ascontiguousarray(output, dtype=np.uint8)
            if flags.shape != arr.shape:
                raise ValueError(f"output flags must match the tokens: {flags.shape} vs {arr.shape}")
            out_ptr = ffi.from_buffer("uint8_t[]", flags)
        rows = ffi.NULL
        if hidden is not None:
            if not isinstance(hidden, np.ndarray) or hidden.dtype != _F32 or not hidden.flags.c_contiguous:
                raise ValueError("hidden rows must be a C-contiguous float32 numpy array")
            if hidden.size != arr.size * self.n_embd:
                raise ValueError(f"hidden rows: need {arr.size} x {self.n_embd} floats, got {hidden.size}")
            rows = ffi.cast("const float *", ffi.from_buffer(hidden))
        with self.lock:
            for s in set(seq_arr.tolist()):
                self._wrote(s)
            check(
                lib.pymtp_decode_rows(
                    self._handle(),
                    ffi.from_buffer("int32_t[]", arr),
                    ffi.from_buffer("int32_t[]", pos_arr),
                    ffi.from_buffer("int32_t[]", seq_arr),
                    len(arr),
                    out_ptr,
                    rows,
                )
            )

    def _decode_from(
        self, tokens: Tokens, pos0: int, seq_id: int, output: Flags | None, hidden: np.ndarray | None
    ) -> None:
        """decode_rows of one sequence's tokens at pos0, pos0+1, ..."""
        arr = _as_tokens(tokens)  # a Tokens iterable need not have a len()
        n = len(arr)
        self.decode_rows(
            arr,
            np.arange(pos0, pos0 + n, dtype=np.int32),
            np.full(n, seq_id, dtype=np.int32),
            output=output,
            hidden=hidden,
        )


class TargetContext(_Context):
    """Runs the trunk. Each decoded token also yields its hidden row (MTP models)."""

    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int = 4096,
        n_batch: int = 512,
        n_rs_seq: int = 0,
        n_threads: int | None = None,
        n_seq_max: int = 1,
    ) -> None:
        super().__init__(model)
        self._drafts: weakref.WeakSet[DraftContext] = weakref.WeakSet()
        p = self._params(n_ctx, n_batch, n_rs_seq, n_threads, n_seq_max)
        self.n_threads: int = p.n_threads  # the costs the auto policy calibrates are per thread count
        with self.lock:
            self._h = _new_handle("pymtp_ctx **", lib.pymtp_ctx_create, self.model._handle(), p)
            self._init_info()

    def decode(self, tokens: Tokens, pos0: int, *, seq_id: int = 0, output: Flags | None = None) -> None:
        """Decode tokens at positions pos0, pos0+1, ...; output: per-row logits flags (None = all).
        (decode_rows of one sequence.)"""
        self._decode_from(tokens, pos0, seq_id, output, None)

    def checkpoint_save(self, seq_id: int = 0) -> None:
        """Save the recurrent state of a sequence (hybrid models without n_rs_seq rollback)."""
        with self.lock:
            check(lib.pymtp_checkpoint_save(self._handle(), seq_id))

    def checkpoint_restore(self, seq_id: int = 0) -> None:
        with self.lock:
            self._wrote(seq_id)
            check(lib.pymtp_checkpoint_restore(self._handle(), seq_id))

    def _close_children(self) -> None:
        for d in list(self._drafts):
            d.close()


class DraftContext(_Context):
    """Runs only the model's MTP head(s), fed with the target's hidden rows."""

    is_draft = True

    def __init__(
        self, target: TargetContext, *, n_batch: int | None = None, n_threads: int | None = None, n_seq_max: int = 1
    ) -> None:
        model = target.model
        super().__init__(model)
        if not model.mtp_loaded:
            raise UnsupportedError(
                f"{model.path.name} has no MTP blocks loaded ({model.architecture}, n_mtp_layers="
                f"{model.n_mtp_layers}): it cannot draft. Run it with speculative=False."
            )
        p = self._params(target.n_ctx, n_batch or target.n_batch, 0, n_threads, n_seq_max)
        self.n_threads: int = p.n_threads
        # No PYMTP_MAX_UBATCH cap here: the trimmed draft vocabulary reads a batch's chosen head
        # rows from one ubatch, and a draft decode of more than 8 rows (many texts) needs them.
        p.n_ubatch = 0
        with self.lock:
            self._h = _new_handle("pymtp_ctx **", lib.pymtp_draft_create, target._handle(), p)
            self._init_info()
        self.target = target
        self.vocab_size = 0  # a trimmed vocabulary's size (set_vocab); 0: all tokens
        self.vocab_ids = np.zeros(0, dtype=np.int64)  # and its token ids
        self.vocab_asked = 0  # the size a drafter asked when it last trimmed (and probed) it
        target._drafts.add(self)

    def decode(
        self,
        tokens: Tokens,
        pos0: int,
        hidden_first: np.ndarray,
        hidden_rest: np.ndarray | None = None,
        *,
        seq_id: int = 0,
        output: Flags | None = None,
    ) -> None:
        """Decode tokens, token i paired with the target hidden row of position pos0+i-1.

        hidden_first is that row for token 0; hidden_rest holds the rows for tokens 1..
        (float32, C-contiguous, n_embd wide; a view of the target's hidden() works)."""
        n = len(_as_tokens(tokens))
        first = self._checked_rows(hidden_first, 1)
        if n == 1:
            self._decode_from(tokens, pos0, seq_id, output, first)
            return
        if hidden_rest is None:
            raise ValueError(f"hidden rows: need {n - 1} x {self.n_embd} floats for tokens 1.., got none")
        self._decode_from(tokens, pos0, seq_id, output, np.concatenate([first, self._checked_rows(hidden_rest, n - 1)]))

    def _checked_rows(self, rows: np.ndarray, n_rows: int) -> np.ndarray:
        """The first n_rows rows of rows as (n_rows, n_embd), refusing what is not float32 rows."""
        if not isinstance(rows, np.ndarray) or rows.dtype != _F32 or not rows.flags.c_contiguous:
            raise ValueError("hidden rows must be a C-contiguous float32 numpy array")
        if rows.size < n_rows * self.n_embd:
            raise ValueError(f"hidden rows: need {n_rows} x {self.n_embd} floats, got {rows.size}")
        return rows.reshape(-1)[: n_rows * self.n_embd].reshape(n_rows, self.n_embd)

    def draft_greedy(
        self,
        seq_ids: np.ndarray,
        pos: np.ndarray,
        n_max: np.ndarray,
        p_min: np.ndarray,
        out_ids: np.ndarray,
        out_probs: np.ndarray,
        out_n: np.ndarray,
    ) -> None:
        """The head's greedy recursions of several sequences in one native call (argmax, its own
        hidden row, one decode per draft position for the sequences still going): row r of the
        last decode predicts for seq_ids[r], from position pos[r], stopping at n_max[r] tokens or
        below p_min[r]. Fills out_ids / out_probs (n_seq x stride) and out_n (int32 / float32
        numpy arrays)."""
        seq_ids, pos, n_max = (np.ascontiguousarray(a, dtype=np.int32) for a in (seq_ids, pos, n_max))
        p_min = np.ascontiguousarray(p_min, dtype=np.float32)
        n = len(seq_ids)
        if not (len(pos) == len(n_max) == len(p_min) == len(out_n) == n == out_ids.shape[0] == out_probs.shape[0]):
            raise ValueError("draft_greedy: one entry per sequence in every array")
        for arr, dtype in ((out_ids, np.int32), (out_probs, np.float32), (out_n, np.int32)):
            if arr.dtype != dtype or not arr.flags.c_contiguous or not arr.flags.writeable:
                raise ValueError(f"draft_greedy: outputs must be writable C-contiguous {np.dtype(dtype).name} arrays")
        if out_ids.shape != out_probs.shape or out_ids.ndim != 2:
            raise ValueError("draft_greedy: out_ids and out_probs must be n_seq x stride arrays")
        with self.lock:
            for s in set(seq_ids.tolist()):
                self._wrote(s)
            check(
                lib.pymtp_draft_greedy(
                    self._handle(),
                    n,
                    ffi.from_buffer("int32_t[]", seq_ids),
                    ffi.from_buffer("int32_t[]", pos),
                    ffi.from_buffer("int32_t[]", n_max),
                    ffi.from_buffer("float[]", p_min),
                    out_ids.shape[1],
                    ffi.from_buffer("int32_t[]", out_ids),
                    ffi.from_buffer("float[]", out_probs),
                    ffi.from_buffer("int32_t[]", out_n),
                )
            )

    def set_vocab(self, token_ids: Tokens) -> None:
        """Score only these tokens from now on (a trimmed draft vocabulary; an empty list: all).
        The logits stay n_vocab wide, -inf elsewhere, and only a decode's last row has them."""
        ids = np.unique(np.asarray(token_ids, dtype=np.int64))
        if ids.size and (ids[0] < 0 or ids[-1] >= self.n_vocab):
            raise ValueError(f"draft vocabulary: token ids must be in [0, {self.n_vocab})")
        arr = ids.astype(np.int32)
        with self.lock:  # the KV is untouched: not a write
            check(lib.pymtp_draft_set_vocab(self._handle(), ffi.from_buffer("int32_t[]", arr), arr.size))
        self.vocab_size = int(arr.size)
        self.vocab_ids = ids
        self.vocab_asked = 0  # a drafter that trims it says so after its probe

    def set_head(self, head: int) -> None:
        """Choose which MTP block runs next (chained heads, e.g. step35)."""
        with self.lock:
            check(lib.pymtp_draft_set_head(self._handle(), head))
