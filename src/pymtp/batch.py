"""Batched generation: several texts advance together, one batched speculative step at a time.

Each text lives in its own sequence of two shared contexts (pymtp.seqview) and is driven by
an MTPSpeculator of its own: its sampling settings and RNG, drafter (made by pymtp.drafters,
as a Session's), draft policy, stop strings and statistics. A step of the batch is the
engine's step (pymtp.engine: single-head MTP drafts together, one verify decode for all,
each text settling on its own), the same one a single generation runs with one text.

Texts join between steps (their prompt is prefilled then) and leave when they finish,
without stalling the others (continuous batching). A slot keeps its last text's cache, and a
new text goes to the free slot whose last text shares the longest prefix with its prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from . import engine
from .config import GenerationConfig, SamplingConfig, SpecConfig
from .drafters import check_can_draft, drafter_kind, make_drafter
from .errors import UnsupportedError
from .model import DraftContext, Model, TargetContext
from .rollback import n_rs_seq_for
from .sampling import LogitsProcessor, TokenConstraint
from .seqview import DraftView, TargetView
from .session import Session
from .speculator import MTPSpeculator
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
    result: GenerationResult | None = None  # once finished

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

    def __init__(
        self,
        model: Session | Model,
        n_seq: int = 4,
        *,
        n_ctx: int = 2048,
        n_batch: int = 512,
        spec: SpecConfig | bool | None = True,
    ) -> None:
        self.session = model if isinstance(model, Session) else None
        self.model: Model = model.model if isinstance(model, Session) else model
        if not 1 <= n_seq <= 64:
            raise ValueError(f"n_seq must be in [1, 64], got {n_seq}")
        self.n_seq, self.n_ctx = n_seq, n_ctx
        self.spec = SpecConfig() if spec is True else (spec or None)
        # one pool of n_seq * n_ctx cells: every sequence may fill its n_ctx
        self.target = TargetContext(
            self.model, n_ctx=n_seq * n_ctx, n_batch=n_batch, n_seq_max=n_seq, n_rs_seq=n_rs_seq_for(self.model)
        )
        self.draft = DraftContext(self.target, n_seq_max=n_seq) if self.model.mtp_loaded else None
        self._speculators: list[MTPSpeculator | None] = [None] * n_seq
        self._kinds: list[str | None] = [None] * n_seq  # each slot's drafter kind
        self.active: dict[int, BatchItem] = {}
        self._lru: list[int] = list(range(n_seq))  # free slots, least recently used first

    # ---- joining and leaving -------------------------------------------------------------------

    @property
    def free(self) -> int:
        return self.n_seq - len(self.active)

    def add(
        self,
        prompt: list[int],
        *,
        sampling: SamplingConfig | None = None,
        spec: SpecConfig | None = None,
        limits: GenerationConfig | None = None,
        constraint: TokenConstraint | None = None,
        logits_processor: LogitsProcessor | None = None,
        logprobs: bool = False,
        top_logprobs: int = 0,
    ) -> BatchItem:
        """Start a text in a free slot (its prompt is prefilled now); it takes part from the
        next step() on. constraint, logits_processor, logprobs, top_logprobs: as for a single
        generation (MTPSpeculator.start), for this text."""
        if not self.free:
            raise UnsupportedError(f"all {self.n_seq} slots are busy: wait for a text to finish")
        if len(prompt) >= self.n_ctx:
            raise ValueError(
                f"the prompt has {len(prompt)} tokens; the context of a slot holds {self.n_ctx} "
                "(leave room for at least one new token)"
            )
        seq = self._pick_slot(prompt)
        sp = self._speculator(seq, spec if spec is not None else self.spec)
        sp.start(
            prompt,
            sampling or SamplingConfig(),
            constraint=constraint,
            logits_processor=logits_processor,
            logprobs=logprobs,
            top_logprobs=top_logprobs,
        )
        self._lru.remove(seq)
        out = TextOutput(
            self.session or self.model,
            limits or GenerationConfig(),
            logprobs=logprobs,
            top_logprobs=top_logprobs,
            constraint=constraint,
        )
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
        """The slot's speculator, made again when the drafter kind changes (the factory
        pymtp.drafters makes every kind, as for a Session)."""
        sp = self._speculators[seq]
        kind = drafter_kind(spec)
        if sp is None or self._kinds[seq] != kind:
            check_can_draft(self.model, kind)
            target = TargetView(self.target, seq, n_ctx=self.n_ctx)
            draft = DraftView(self.draft, seq, n_ctx=self.n_ctx) if self.draft is not None else None
            # the policy's costs are the batch's: one verify of every sequence's rows
            # (a sequence's views stand in for the contexts: they forward the rest to them)
            sp = MTPSpeculator(
                cast(TargetContext, target),
                make_drafter(kind, self.model, draft),
                spec=spec or SpecConfig(),
                batch_rows=self.n_seq * ((spec or SpecConfig()).n_draft + 1),
            )
            self._speculators[seq], self._kinds[seq] = sp, kind
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
        """One batched speculative step for every active text (pymtp.engine); returns (item, text
        piece) for each text that produced visible text. Finished texts leave the batch."""
        items = list(self.active.values())
        pieces = []
        for it in [it for it in items if it.speculator.room() < 1]:
            pieces.append((it, it.out.end("context")))
            self._leave(it)
        items = [it for it in items if not it.finished]
        if not items:
            return pieces
        steps = engine.step([it.speculator for it in items], [it.out.remaining() for it in items])
        for it, st in zip(items, steps):
            it.steps.append(st)
            piece = it.out.take(st, it.speculator.room())
            if piece or it.out.finish:
                pieces.append((it, piece))
        for it in items:
            if it.out.finish is not None:
                self._leave(it)
        return pieces

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

    def __exit__(self, *exc: object) -> None:
        self.close()
