"""Rollback: the one place that decides how a context forgets rejected draft positions.

After a verify decode of ``[last, d1..dk]`` at positions ``n_past..n_past+k``, the
target keeps ``n_past + n_accepted + 1`` positions. How depends on its memory, and is
chosen once per context by :func:`rollback_for`:

* ``KVTrim``: attention KV cells are dropped past ``n_keep`` (``seq_rm``). Hybrid
  recurrent models whose context keeps ``n_rs_seq`` snapshots of the recurrent state
  roll back the same way, up to ``n_rs_seq`` positions (llama.cpp restores a snapshot).
* ``CheckpointTrim``: recurrent models without enough snapshots save the recurrent
  state before the verify (``mark``), and on rejection restore it, drop the verified
  positions and decode the accepted prefix again.

The verb is ``trim(n_keep)``, for target and draft contexts alike; the speculator
also calls it when a step fails half-way, to put the context back where it was.
The shim refuses a rollback llama.cpp cannot do (its depth check); it never chooses.
"""

from __future__ import annotations

from .model import DraftContext, Model, TargetContext, last_row_only

#: Recurrent-state snapshots a hybrid model's target context keeps: enough to roll back
#: drafts of up to 4 tokens without a checkpoint (each snapshot costs a copy of the state).
N_RS_SNAPSHOTS = 4


def n_rs_seq_for(model: Model) -> int:
    """Snapshots to ask for when making a target context of this model."""
    return N_RS_SNAPSHOTS if (model.is_recurrent and model.supports_rollback) else 0


class KVTrim:
    """Roll back by dropping positions (attention KV; recurrent state with snapshots)."""

    kind = "kv"

    def __init__(self, ctx: TargetContext | DraftContext) -> None:
        self.ctx = ctx

    def mark(self, n_past: int, tokens: list[int]) -> None:
        """A decode of tokens at n_past.. follows that may be rolled back (nothing to save)."""

    def trim(self, n_keep: int) -> None:
        """Keep positions < n_keep."""
        self.ctx.seq_rm(n_keep)


class CheckpointTrim:
    """Roll back a recurrent target by checkpoint, then re-decode what was kept."""

    kind = "checkpoint"

    def __init__(self, ctx: TargetContext) -> None:
        self.ctx = ctx
        self._base: int | None = None
        self._tokens: list[int] = []

    def mark(self, n_past: int, tokens: list[int]) -> None:
        self.ctx.checkpoint_save()
        self._base, self._tokens = n_past, list(tokens)

    def trim(self, n_keep: int) -> None:
        base = self._base
        if base is None or n_keep >= base + len(self._tokens):
            return  # nothing decoded past n_keep since the mark
        self._base = None
        self.ctx.checkpoint_restore()
        self.ctx.seq_rm(base)
        redo = self._tokens[: max(0, n_keep - base)]
        if redo:
            self.ctx.decode(redo, base, output=last_row_only(len(redo)))


def rollback_for(ctx: TargetContext | DraftContext, max_rollback: int) -> KVTrim | CheckpointTrim:
    """How this context rolls back drafts of up to max_rollback tokens."""
    if not ctx.is_draft and ctx.model.is_recurrent and ctx.n_rs_seq < max_rollback:
        return CheckpointTrim(ctx)  # type: ignore[arg-type]  # not is_draft: a target context
    return KVTrim(ctx)
