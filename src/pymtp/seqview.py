"""One sequence of a shared context, seen as a context of its own.

Batched generation (pymtp.batch) runs several texts in one TargetContext and one
DraftContext, each text in its own sequence (seq_id). An MTPSpeculator, its MTPDrafter and
its rollback work on a view bound to that seq_id, with the calls they make on a
single-sequence context; the engine's shared decodes address ``view.ctx`` with the views'
seq_ids (a context used whole is the handle of its sequence 0: ``ctx.ctx``, ``ctx.seq_id``).

A view's ``write_count()`` is its sequence's count of writes, kept by the context, so a
speculator's check that nothing else changed its cache (prompt reuse) sees its sequence only.
"""

from __future__ import annotations

import numpy as np

from .contexts import DraftContext, TargetContext, _Context


def _from_ctx(name: str) -> property:
    """A view's property that is its shared context's fact of that name."""
    return property(lambda self: getattr(self.ctx, name), doc=f"the shared context's {name}")


class _SeqView:
    is_draft = False

    def __init__(self, ctx: TargetContext | DraftContext, seq_id: int, *, n_ctx: int | None = None) -> None:
        self.ctx = ctx
        self.seq_id = seq_id
        # the positions this sequence may use (the contexts' cells are shared: n_ctx each)
        self.n_ctx = n_ctx if n_ctx is not None else ctx.n_ctx

    # ---- the shared context's facts ------------------------------------------------------------

    model = _from_ctx("model")
    lock = _from_ctx("lock")
    n_batch = _from_ctx("n_batch")
    n_embd = _from_ctx("n_embd")
    n_vocab = _from_ctx("n_vocab")
    n_rs_seq = _from_ctx("n_rs_seq")
    n_threads = _from_ctx("n_threads")
    closed = _from_ctx("closed")

    def logits(self) -> np.ndarray:
        """The shared context's logits of its last decode (rows of every sequence in it)."""
        return self.ctx.logits()

    def hidden(self) -> np.ndarray:
        return self.ctx.hidden()

    def write_count(self) -> int:
        return self.ctx.write_count(self.seq_id)

    # ---- this sequence's memory ----------------------------------------------------------------

    def seq_rm(self, p0: int, p1: int = -1) -> None:
        self.ctx.seq_rm(p0, p1, seq_id=self.seq_id)

    def pos_max(self) -> int:
        return self.ctx.pos_max(self.seq_id)

    def pos_min(self) -> int:
        return self.ctx.pos_min(self.seq_id)

    min_cut = _Context.min_cut  # the context's rule, on this view's pos_min()

    def get_state(self, *, partial: bool = False) -> np.ndarray:
        return self.ctx.get_state(self.seq_id, partial=partial)

    def set_state(self, state: np.ndarray, *, partial: bool = False) -> None:
        self.ctx.set_state(state, self.seq_id, partial=partial)


class TargetView(_SeqView):
    """A TargetContext's sequence seq_id."""

    ctx: TargetContext

    def decode(self, tokens, pos0: int, *, output=None) -> None:
        self.ctx.decode(tokens, pos0, seq_id=self.seq_id, output=output)

    def checkpoint_save(self) -> None:
        self.ctx.checkpoint_save(self.seq_id)

    def checkpoint_restore(self) -> None:
        self.ctx.checkpoint_restore(self.seq_id)


class DraftView(_SeqView):
    """A DraftContext's sequence seq_id."""

    ctx: DraftContext
    is_draft = True

    vocab_size = _from_ctx("vocab_size")
    vocab_ids = _from_ctx("vocab_ids")

    def set_vocab(self, token_ids) -> None:
        # the whole context's: every sequence drafts with the same trimmed vocabulary
        if not np.array_equal(np.unique(np.asarray(token_ids, dtype=np.int64)), self.ctx.vocab_ids):
            self.ctx.set_vocab(token_ids)

    def set_head(self, head: int) -> None:
        # the whole context's: chained heads draft one sequence at a time
        self.ctx.set_head(head)
