"""One sequence of a shared context, seen as a context of its own.

Batched generation (pymtp.batch) runs several texts in one TargetContext and one
DraftContext, each text in its own sequence (seq_id). An MTPSpeculator, its MTPDrafter and
its rollback work on a view bound to that seq_id, with the calls they make on a
single-sequence context; only the batched decodes (pymtp.batch) address several sequences.

Each view counts the writes to its own sequence (``n_writes``), so a speculator's check that
nothing else changed its cache (prompt reuse) sees its sequence only.
"""

from __future__ import annotations

import numpy as np

from .model import DraftContext, TargetContext, _Context


class _SeqView:
    def __init__(self, ctx: TargetContext | DraftContext, seq_id: int, *, n_ctx: int | None = None) -> None:
        self.ctx = ctx
        self.seq_id = seq_id
        self.n_writes = 0
        # the positions this sequence may use (the contexts' cells are shared: n_ctx each)
        self.n_ctx = n_ctx if n_ctx is not None else ctx.n_ctx

    def __getattr__(self, name: str):
        # the rest (model, n_ctx, n_batch, n_embd, logits(), hidden(), lock...) is the context's
        return getattr(self.ctx, name)

    def seq_rm(self, p0: int, p1: int = -1) -> None:
        self.n_writes += 1
        self.ctx.seq_rm(p0, p1, seq_id=self.seq_id)

    def pos_max(self) -> int:
        return self.ctx.pos_max(self.seq_id)

    def pos_min(self) -> int:
        return self.ctx.pos_min(self.seq_id)

    min_cut = _Context.min_cut          # the context's rule, on this view's pos_min()

    def get_state(self, *, partial: bool = False) -> np.ndarray:
        return self.ctx.get_state(self.seq_id, partial=partial)

    def set_state(self, state: np.ndarray, *, partial: bool = False) -> None:
        self.n_writes += 1
        self.ctx.set_state(state, self.seq_id, partial=partial)


class TargetView(_SeqView):
    """A TargetContext's sequence seq_id."""

    def decode(self, tokens, pos0: int, *, output=None) -> None:
        self.n_writes += 1
        self.ctx.decode(tokens, pos0, seq_id=self.seq_id, output=output)

    def checkpoint_save(self) -> None:
        self.ctx.checkpoint_save(self.seq_id)

    def checkpoint_restore(self) -> None:
        self.n_writes += 1
        self.ctx.checkpoint_restore(self.seq_id)


class DraftView(_SeqView):
    """A DraftContext's sequence seq_id."""

    def decode(self, tokens, pos0: int, hidden_first: np.ndarray, hidden_rest: np.ndarray | None = None, *,
               output=None) -> None:
        self.n_writes += 1
        self.ctx.decode(tokens, pos0, hidden_first, hidden_rest, seq_id=self.seq_id, output=output)

    def draft_greedy(self, pos: int, n_max: int, p_min: float, out_ids, out_probs) -> int:
        self.n_writes += 1
        return self.ctx.draft_greedy(pos, n_max, p_min, out_ids, out_probs, seq_id=self.seq_id)

    def set_vocab(self, token_ids) -> None:
        # the whole context's: every sequence drafts with the same trimmed vocabulary
        if not np.array_equal(np.unique(np.asarray(token_ids, dtype=np.int64)), self.ctx.vocab_ids):
            self.ctx.set_vocab(token_ids)
