"""The engine: one speculative step over a batch of texts. A single generation is a batch of one.

Every text is an MTPSpeculator (its sampler and RNG, draft policy, rollback, drafter and
statistics) on one sequence of a shared pair of contexts: a Session's contexts hold one, a
Batch's hold n_seq. One step, for all of them:

  DRAFT   each text's policy sizes its draft (pymtp.policy.plan_batch: in a batch, beside the
          others' rows), then each text's drafter plans its draft (pymtp.mtp_drafter.draft_all): single-head MTP
          drafts are made together, one draft decode per draft position for every text;
          prompt lookup and chained heads draft one text at a time.
  VERIFY  one target decode carries every text's [last, d1..dk].
  SETTLE  each text accepts, hands off, rolls back and updates its policy on its own
          (MTPSpeculator.settle).

A step that fails puts every text it had not settled back where the step found it.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter
from typing import TYPE_CHECKING

from .drafter import Draft, DraftRequest
from .mtp_drafter import draft_all
from .policy import AutoPolicy, observe_batch_draft, plan_batch
from .stats import StepResult

if TYPE_CHECKING:
    from .speculator import MTPSpeculator


def step(seqs: Sequence[MTPSpeculator], max_new: Sequence[int | None]) -> list[StepResult]:
    """One speculative step for every text (max_new[i]: the most tokens text i may emit now,
    None: no bound); returns each text's StepResult, in order."""
    # Kept flat for the plain step of one text (#31: nothing gets slower): no draft requests,
    # planning or per-text lists a step does not use (tools/measure_step_python.py measures it).
    for sp in seqs:
        sp.check_ready()
    first = seqs[0]
    ctx = first.target.ctx
    if len(seqs) > 1 and any(sp.target.ctx is not ctx for sp in seqs):
        raise ValueError("texts stepped together must share one target context")
    t0 = perf_counter()
    n_pasts = [sp.n_past for sp in seqs]
    results: list[StepResult] = []
    try:
        # DRAFT (texts without a draft policy decode plainly: k = 0)
        ks = plan_batch(seqs, list(max_new)) if any(sp.policy is not None for sp in seqs) else None
        if ks is not None and any(ks):
            requests = [
                DraftRequest(
                    sp.tokens[-1],
                    sp.n_past,
                    k,
                    sp.sampler,
                    sp.tokens,
                    sp.policy.p_min if sp.policy else 0.0,
                    sp.constraint,
                )
                for sp, k in zip(seqs, ks)
            ]
            drafts = draft_all([sp.drafter for sp in seqs], requests)
        else:
            drafts = [Draft() for _ in seqs]
        t1 = perf_counter()
        # VERIFY: one target decode of every text's [last, d1..dk]
        tokens: list[int] = []
        pos: list[int] = []
        seq_ids: list[int] = []
        offsets: list[int] = []
        wants_hidden = False
        for sp, d in zip(seqs, drafts):
            rows = [sp.tokens[-1], *d.tokens]
            n_past = sp.n_past
            sp.rollback.mark(n_past, rows)  # a plain step too: a failure must undo its decode
            offsets.append(len(tokens))
            tokens += rows
            pos += range(n_past, n_past + len(rows))
            seq_ids += [sp.target.seq_id] * len(rows)
            wants_hidden = wants_hidden or (sp.drafter is not None and sp.drafter.wants_hidden)
        ctx.decode_rows(tokens, pos, seq_ids)
        logits, hidden = ctx.logits(), ctx.hidden() if wants_hidden else None
        if len(seqs) > 1 and any(sp.rollback.kind == "checkpoint" for sp in seqs):
            # a checkpoint rollback re-decodes, which rewrites the rows the others still read
            logits, hidden = logits.copy(), None if hidden is None else hidden.copy()
        t2 = perf_counter()
        if len(seqs) > 1 or first.batch_rows:  # only a Batch's texts share costs (pymtp.policy)
            _observe_shared_costs(seqs, drafts, t1 - t0, t2 - t1)
        if len(seqs) == 1:  # its rows are the whole decode's
            results.append(first.settle(drafts[0], logits, hidden, t0, t1, t2))
        else:
            for sp, d, o in zip(seqs, drafts, offsets):
                n = len(d.tokens) + 1
                wh = sp.drafter is not None and sp.drafter.wants_hidden
                h = hidden[o : o + n] if wh and hidden is not None else None
                results.append(sp.settle(d, logits[o : o + n], h, t0, t1, t2))
    except BaseException:
        for sp, n_past in list(zip(seqs, n_pasts))[len(results) :]:
            sp.recover(n_past)
        raise
    return results


def _observe_shared_costs(seqs: Sequence[MTPSpeculator], drafts: list[Draft], t_draft: float, t_verify: float) -> None:
    """Auto policies whose costs a batch shares (pymtp.policy) learn them once per step: one
    verify of every text's rows, one drafting phase for all."""
    policies = [sp.policy for sp in seqs if isinstance(sp.policy, AutoPolicy) and sp.policy.shared]
    if not policies:
        return
    costs = policies[0].costs
    n_rows = sum(len(d.tokens) + 1 for d in drafts)
    mean_pos = sum((sp.n_past + len(d.tokens) / 2) * (len(d.tokens) + 1) for sp, d in zip(seqs, drafts)) / n_rows
    costs.observe_verify(n_rows, mean_pos, t_verify)
    # head decodes: a token the confidence cut dropped was decoded too
    decodes = [
        (sp.policy.head_decodes(len(d.tokens)), sp.policy) for sp, d in zip(seqs, drafts) if sp.policy is not None
    ]
    observe_batch_draft(costs, decodes, t_draft, policies[0].mode)


def crossings(run) -> dict[str, int]:
    """Calls into libpymtp, by function, while run() runs (pymtp._native.instrument)."""
    from ._native import instrument

    counts: dict[str, int] = {}

    def on_call(name: str, _seconds: float) -> None:
        counts[name] = counts.get(name, 0) + 1

    with instrument(on_call):
        run()
    return counts


__all__ = ["step", "crossings"]
