"""Batched generation: several texts advance together, one batched speculative step at a time.

Each text lives in its own sequence of two shared contexts (pymtp.seqview) and is driven by
an MTPSpeculator of its own: its sampling settings and RNG, draft policy, stop strings and
statistics. One step of the batch:

  DRAFT   single-head MTP drafters draft together: one draft decode per draft position
          carries every sequence's rows (first the queued accepted tokens and the last token,
          then each drafted token with the head's own hidden row). Other drafters (chained
          heads, prompt lookup, your own) propose one sequence at a time.
  VERIFY  one target decode carries every sequence's [last, d1..dk].
  SETTLE  each sequence accepts, hands off and rolls back on its own (MTPSpeculator.settle).

Texts join between steps (their prompt is prefilled then) and leave when they finish,
without stalling the others (continuous batching). A slot keeps its last text's cache, and a
new text goes to the free slot whose last text shares the longest prefix with its prompt.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ._native import ffi, lib
from .config import GenerationConfig, SamplingConfig, SpecConfig
from .drafter import Draft, MTPDrafter
from .errors import UnsupportedError
from .model import DraftContext, TargetContext
from .policy import AutoPolicy, plan_batch
from .rollback import n_rs_seq_for
from .seqview import DraftView, TargetView
from .speculator import MTPSpeculator, State
from .stats import GenerationResult, StepResult
from .textout import TextOutput


@dataclass
class BatchItem:
    """One text of a Batch: its slot (seq_id), speculator and output so far."""

    seq_id: int
    prompt: list[int]
    speculator: MTPSpeculator
    out: TextOutput
    steps: list[StepResult] = field(default_factory=list)
    result: GenerationResult | None = None      # once finished

    @property
    def finished(self) -> bool:
        return self.result is not None


class Batch:
    """Up to n_seq texts generated together in batched speculative steps.

    model: a Session or a Model (the batch makes contexts of its own: n_seq sequences of
    n_ctx positions each). spec: the SpecConfig of every text unless add() gives another;
    None or False: plain decoding (still batched: one decode per step for all texts).

        batch = Batch(session, n_seq=4)
        a = batch.add(session.tokenize("def add(a, b):"), limits=GenerationConfig(max_tokens=64))
        while batch.active:
            for item, piece in batch.step(): print(item.seq_id, piece)
        a.result.text
    """

    def __init__(self, model, n_seq: int = 4, *, n_ctx: int = 2048, n_batch: int = 512,
                 spec: SpecConfig | bool | None = True) -> None:
        self.model = model.model if hasattr(model, "speculator") else model   # a Session: its Model
        self.session = model if hasattr(model, "speculator") else None
        if not 1 <= n_seq <= 64:
            raise ValueError(f"n_seq must be in [1, 64], got {n_seq}")
        self.n_seq, self.n_ctx = n_seq, n_ctx
        self.spec = SpecConfig() if spec is True else (spec or None)
        # one pool of n_seq * n_ctx cells: every sequence may fill its n_ctx
        self.target = TargetContext(self.model, n_ctx=n_seq * n_ctx, n_batch=n_batch, n_seq_max=n_seq,
                                    n_rs_seq=n_rs_seq_for(self.model))
        self.draft = DraftContext(self.target, n_seq_max=n_seq) if self.model.mtp_loaded else None
        self._speculators: list[MTPSpeculator | None] = [None] * n_seq
        self.active: dict[int, BatchItem] = {}
        self._lru: list[int] = list(range(n_seq))          # free slots, least recently used first
        self._argmax_ids = np.zeros(n_seq, dtype=np.int32)
        self._argmax_p = np.zeros(n_seq, dtype=np.float32)

    # ---- joining and leaving -------------------------------------------------------------------

    @property
    def free(self) -> int:
        return self.n_seq - len(self.active)

    def add(self, prompt: list[int], *, sampling: SamplingConfig | None = None, spec: SpecConfig | None = None,
            limits: GenerationConfig | None = None, constraint=None, logprobs: bool = False,
            top_logprobs: int = 0) -> BatchItem:
        """Start a text in a free slot (its prompt is prefilled now); it takes part from the
        next step() on."""
        if not self.free:
            raise UnsupportedError(f"all {self.n_seq} slots are busy: wait for a text to finish")
        if len(prompt) >= self.n_ctx:
            raise ValueError(f"the prompt has {len(prompt)} tokens; the context of a slot holds {self.n_ctx} "
                             "(leave room for at least one new token)")
        seq = self._pick_slot(prompt)
        sp = self._speculator(seq, spec if spec is not None else self.spec)
        sp.start(prompt, sampling or SamplingConfig(), constraint=constraint, logprobs=logprobs,
                 top_logprobs=top_logprobs)
        self._lru.remove(seq)
        out = TextOutput(self.session or self.model, limits or GenerationConfig(), logprobs=logprobs,
                         top_logprobs=top_logprobs, constraint=constraint)
        item = BatchItem(seq, list(prompt), sp, out)
        self.active[seq] = item
        return item

    def _pick_slot(self, prompt: list[int]) -> int:
        """The free slot whose cached text shares the most with prompt, else the least recently used."""
        best, best_n = self._lru[0], 0
        for seq in self._lru:
            sp = self._speculators[seq]
            if sp is not None and sp.tokens:
                n, _ = sp.reusable_prefix(prompt)
                if n > best_n:
                    best, best_n = seq, n
        return best

    def _speculator(self, seq: int, spec: SpecConfig | None) -> MTPSpeculator:
        sp = self._speculators[seq]
        want_draft = spec is not None and self.draft is not None
        if sp is None or (sp.drafter is not None) != want_draft:
            target = TargetView(self.target, seq, n_ctx=self.n_ctx)
            drafter = MTPDrafter(DraftView(self.draft, seq, n_ctx=self.n_ctx)) if want_draft else None
            sp = MTPSpeculator(target, drafter, spec=spec or SpecConfig(),
                               batch_rows=self.n_seq * ((spec or SpecConfig()).n_draft + 1))
            self._speculators[seq] = sp
        elif spec is not None:
            sp.spec = spec
        return sp

    def cancel(self, item: BatchItem, reason: str = "cancelled") -> None:
        """Take a text out of the batch now (its result keeps what it generated)."""
        if self.active.get(item.seq_id) is item:
            item.out.end(reason)
            self._leave(item)

    def _leave(self, item: BatchItem) -> None:
        item.result = item.out.result(item.prompt, item.speculator.stats)
        del self.active[item.seq_id]
        self._lru.append(item.seq_id)

    # ---- one step ------------------------------------------------------------------------------

    def step(self) -> list[tuple[BatchItem, str]]:
        """One batched speculative step for every active text; returns (item, text piece) for
        each text that produced visible text. Finished texts leave the batch."""
        items = list(self.active.values())
        if not items:
            return []
        pieces = []
        for it in [it for it in items if it.speculator.room() < 1]:
            pieces.append((it, it.out.end("context")))
            self._leave(it)
        items = [it for it in items if not it.finished]
        if not items:
            return pieces
        for it in items:
            it.speculator.check_ready()
        t0 = time.perf_counter()
        n_pasts = [it.speculator.n_past for it in items]
        settled = 0
        try:
            drafts = self._draft(items)
            t1 = time.perf_counter()
            logits, hidden, offsets = self._verify(items, drafts)
            if any(it.speculator.rollback.kind == "checkpoint" for it in items):
                # a checkpoint rollback re-decodes, which rewrites the rows the others still read
                logits, hidden = logits.copy(), None if hidden is None else hidden.copy()
            t2 = time.perf_counter()
            self._observe_costs(items, drafts, t1 - t0, t2 - t1)
            for it, d, o in zip(items, drafts, offsets):
                sp = it.speculator
                n = len(d.tokens) + 1
                h = hidden[o:o + n] if hidden is not None and sp.drafter is not None else None
                step = sp.settle(d, logits[o:o + n], h, t0, t1, t2)
                settled += 1
                it.steps.append(step)
                piece = it.out.take(step, sp.room())
                if piece or it.out.finish:
                    pieces.append((it, piece))
        except BaseException:
            for it, n_past in list(zip(items, n_pasts))[settled:]:
                it.speculator.recover(n_past)
            raise
        for it in items:
            if it.out.finish is not None:
                self._leave(it)
        return pieces

    def _draft(self, items: list[BatchItem]) -> list[Draft]:
        ks = plan_batch([it.speculator for it in items], [it.out.remaining() for it in items])
        drafts = [Draft() for _ in items]
        together = []
        for i, (it, k) in enumerate(zip(items, ks)):
            sp = it.speculator
            if k <= 0 or sp.drafter is None:
                continue
            if isinstance(sp.drafter, MTPDrafter) and not sp.drafter.chained:
                if sp.drafter.can_draft():
                    together.append(i)
            else:                        # one sequence at a time
                drafts[i] = sp.drafter.propose(sp.tokens[-1], sp.n_past, k, sp.sampler, sp.tokens, sp.policy.p_min)
        if together:
            self._draft_together([items[i] for i in together], [ks[i] for i in together], drafts, together)
        return drafts

    def _draft_together(self, items: list[BatchItem], ks: list[int], drafts: list[Draft], where: list[int]) -> None:
        """Single-head MTP drafts of several sequences: one draft decode per draft position."""
        ctx = self.draft
        for j, it in enumerate(items):
            drafts[where[j]] = Draft(q_in_sampler=not it.speculator.sampler.config.greedy)
        # Drafts longer than one token need the head's hidden row of the last token, and a
        # masked nextn decode returns its first rows: feed the queues first, then decode the
        # long drafts' last tokens first in the batch.
        longer = [j for j, k in enumerate(ks) if k > 1]
        self._feed_queues([items[j] for j in longer])
        order = longer + [j for j, k in enumerate(ks) if k == 1]
        if sum(len(items[j].speculator.drafter.queue_inputs()[0]) + 1 for j in order) > ctx.n_batch:
            # long queues (prompts admitted together) would overflow one decode: feed them first
            self._feed_queues([items[j] for j in order])
        parts = [(items[j],) + items[j].speculator.drafter.draft_inputs(items[j].speculator.tokens[-1]) for j in order]
        self._decode_draft(parts, outputs=True)
        for j in order:
            items[j].speculator.drafter.inputs_fed(items[j].speculator.n_past)
        own = ctx.hidden()[:len(longer)]             # the long drafts' last-token rows
        own_of = {j: own[n].copy() for n, j in enumerate(longer)}
        going = self._choose(items, order, drafts, where)
        for depth in range(1, max(ks)):
            going = [j for j in going if depth < ks[j]]
            if not going:
                break
            parts = [(items[j], [drafts[where[j]].tokens[-1]], own_of[j][None, :], items[j].speculator.n_past + depth)
                     for j in going]
            self._decode_draft(parts, outputs=True)
            hid = ctx.hidden()                        # one row per part, in order
            own_of = {j: hid[n].copy() for n, j in enumerate(going)}
            going = self._choose(items, going, drafts, where)
        for j, k in enumerate(ks):
            it = items[j]
            it.speculator.drafter.draft_done(it.speculator.n_past, k, drafts[where[j]])

    def _feed_queues(self, items: list[BatchItem]) -> None:
        """Feed the head the accepted tokens it has not seen, in decodes of at most n_batch rows."""
        rows = [(it,) + it.speculator.drafter.queue_inputs() for it in items]
        rows = [r for r in rows if r[1]]
        if rows:
            self._decode_draft(rows, outputs=False)
            for it in items:
                it.speculator.drafter.queue_fed()

    def _decode_draft(self, parts, *, outputs: bool) -> None:
        """Draft decode of (item, tokens, hidden rows, first position) parts; with outputs, one
        decode with logits for each part's last row, without, as many decodes as n_batch needs."""
        tokens, pos, seqs, flags = [], [], [], []
        for it, toks, _, p0 in parts:
            tokens += toks
            pos += range(p0, p0 + len(toks))
            seqs += [it.seq_id] * len(toks)
            flags += [0] * (len(toks) - 1) + [1 if outputs else 0]
            it.speculator.drafter.ctx.n_writes += 1
        hidden = np.concatenate([h[:len(t)] for _, t, h, _ in parts])      # float32 rows, one array
        flags_arr = np.array(flags, dtype=np.uint8)
        step = len(tokens) if outputs else self.draft.n_batch
        for a in range(0, len(tokens), step):
            b = a + step
            self.draft.decode_rows(tokens[a:b], pos[a:b], seqs[a:b], output=flags_arr[a:b], hidden=hidden[a:b])

    def _choose(self, items: list[BatchItem], order: list[int], drafts: list[Draft], where: list[int]) -> list[int]:
        """Each drafting sequence picks its next token from its row of the last draft decode
        (one native argmax over all rows; sampling sequences draw from their own sampler);
        returns the ones that drafted a token."""
        logits = self.draft.logits()
        n = len(order)
        lib.pymtp_rows_argmax(ffi.from_buffer("float[]", logits), n, logits.shape[1],
                              ffi.from_buffer("int32_t[]", self._argmax_ids), ffi.from_buffer("float[]", self._argmax_p))
        going = []
        for r, j in enumerate(order):
            sp = items[j].speculator
            greedy = (int(self._argmax_ids[r]), float(self._argmax_p[r]))
            if sp.drafter.take(drafts[where[j]], logits[r], sp.sampler, sp.tokens, sp.policy.p_min, greedy):
                going.append(j)
        return going

    def _verify(self, items: list[BatchItem], drafts: list[Draft]):
        """One target decode of every sequence's [last, d1..dk]; returns the logits and hidden
        rows (batch order) and each sequence's first row."""
        tokens, pos, seqs, offsets = [], [], [], []
        for it, d in zip(items, drafts):
            sp = it.speculator
            batch = [sp.tokens[-1]] + d.tokens
            sp.rollback.mark(sp.n_past, batch)
            offsets.append(len(tokens))
            tokens += batch
            pos += range(sp.n_past, sp.n_past + len(batch))
            seqs += [it.seq_id] * len(batch)
            sp.target.n_writes += 1
        self.target.decode_rows(tokens, pos, seqs)
        hidden = self.target.hidden() if self.draft is not None else None
        return self.target.logits(), hidden, offsets

    def _observe_costs(self, items: list[BatchItem], drafts: list[Draft], t_draft: float, t_verify: float) -> None:
        """The auto policy's costs are the batch's: one verify of every sequence's rows."""
        policies = [it.speculator.policy for it in items if isinstance(it.speculator.policy, AutoPolicy)]
        if not policies:
            return
        costs = policies[0].costs
        n_rows = sum(len(d.tokens) + 1 for d in drafts)
        mean_pos = sum((it.speculator.n_past + len(d.tokens) / 2) * (len(d.tokens) + 1)
                       for it, d in zip(items, drafts)) / n_rows
        costs.observe_verify(n_rows, mean_pos, t_verify)
        n_drafted = sum(len(d.tokens) for d in drafts)
        modes = {p.mode for p in policies}
        if n_drafted and len(modes) == 1 and not any(p.catching_up for p in policies):
            costs.observe_draft(n_drafted, t_draft, modes.pop())

    # ---- running -----------------------------------------------------------------------------

    def run(self) -> None:
        """Step until every active text has finished."""
        while self.active:
            self.step()

    def close(self) -> None:
        for sp in self._speculators:
            if sp is not None:
                sp.close()
        if self.draft is not None:
            self.draft.close()
        self.target.close()

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
