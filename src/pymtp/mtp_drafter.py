"""The MTP drafter: proposes tokens with the model's own MTP head(s).

Hand-off rule: the head at position p takes token x(p) paired with the
target's hidden row h(p-1). The drafter keeps its context's KV in step with
the accepted text: every token the target accepts is fed to the head with the
hidden row one position earlier, lazily, in the same decode as the next draft.

Two modes:
* one head (glm4moe, qwen35, deepseek...): the drafts of every text sharing the draft context
  are made together (draft_with_heads; a single generation is a batch of one): one draft
  decode per draft position carries every text's rows. The first carries each text's
  not-yet-fed accepted tokens plus its last token; a text drafting more than one token has
  its queue fed first and its last token decoded at the front (its hidden row seeds the
  recursion, and llama.cpp's masked nextn rows are a decode's first rows), then the head
  recurses on its own hidden output;
* chained heads (step35): head i drafts token i+1; each head keeps its own
  KV layer, so accepted tokens are fed once per head, and draft step i
  re-decodes the drafted prefix with head i (as llama.cpp's driver does); one text at a time.

After a run of plain steps (a draft length of 0) longer than CATCH_UP_KEEP, the head is fed only
the last CATCH_UP_KEEP queued tokens: the rest (the plain steps' other tokens, and the prompt or a
draft step's tokens queued before them) is skipped. llama.cpp wants a sequence's positions
consecutive, so the gap is closed: the tokens after it sit as many positions earlier in the
head's KV as were skipped before them (`_shift`; positions below `_gap_at` are the target's). RoPE sees only
relative positions, so the head sees the tokens after the gap as if they followed the ones before
it directly. Drafts stay lossless either way: the target verifies them.

Also here: draft_all, the drafting of one engine step (every text's plan; the HeadJobs made
together).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ._native import ffi, lib
from .config import SpecConfig
from .costs import CATCH_UP_KEEP
from .draft_vocab import frequent_tokens
from .drafter import Draft, Drafter, DraftRequest, HeadJob
from .errors import UnsupportedError
from .model import DraftContext
from .rollback import KVTrim
from .sampling import Q_IN_SLOTS, Sampler


@dataclass
class HeadState:
    """MTPDrafter.save(): the head's KV (bytes of its context), how far it reaches, and the
    pending hidden row that pairs with the token at kv_end (None: no row yet)."""

    kv: np.ndarray
    kv_end: int
    pending: np.ndarray | None
    shift: int = 0  # positions skipped (a closed gap): the head's position = the target's - shift
    gap_at: int | None = None  # the first skipped position (below it the positions are the target's)
    end_row: tuple[int, np.ndarray] | None = None  # MTPDrafter.keep_row_at: a prompt's end and its row


def draft_all(drafters: list[Drafter | None], requests: list[DraftRequest]) -> list[Draft]:
    """Each text's draft for this step: drafters that plan a HeadJob draft together, in one
    draft decode per draft position (texts sharing a draft context); the others on their own."""
    drafts = [Draft() for _ in requests]
    jobs, where = [], []
    for i, (d, r) in enumerate(zip(drafters, requests)):
        if d is None or r.k <= 0:
            continue
        plan = d.plan(r)
        if isinstance(plan, HeadJob):
            jobs.append(plan)
            where.append(i)
        else:
            drafts[i] = plan
    if jobs:
        t0 = time.perf_counter()
        made = draft_with_heads(jobs)
        dt = time.perf_counter() - t0
        for i, job, draft in zip(where, jobs, made):
            drafts[i] = draft
            job.owner.drafted(draft, dt)
    return drafts


class MTPDrafter(Drafter):
    """Drives a DraftContext. See the module docstring for the hand-off rule."""

    wants_hidden = True
    last_source = "mtp"

    def __init__(self, draft: DraftContext) -> None:
        self.ctx = draft
        self.rollback = KVTrim(draft)  # the head's own drafted rows are dropped after a draft
        model = draft.model
        self.n_embd = model.n_embd
        self.n_heads = max(1, model.n_mtp_layers)
        self.chained = self.n_heads > 1  # SpecConfig.heads "chain" (configure may switch it off)
        # Accepted tokens not yet in the draft KV, and the hidden row each pairs with;
        # the row after the last of them (`pending`) pairs with the newest token.
        cap = draft.n_batch + 1
        self._rows = np.zeros((cap, self.n_embd), dtype=np.float32)
        self._feed: list[int] = []
        self._has_pending = False
        self._kv_end = 0  # the draft KV holds positions < kv_end (but those skipped)
        self._shift = 0  # positions skipped so far: the head's KV holds position p at p - shift
        self._gap_at: int | None = None  # the first position skipped (None: none)
        self._step_run = 0  # queued tokens at the queue's end that plain steps handed off
        # (position p, the target's hidden row of p - 1) at the end of the last prompt: a later
        # prompt that keeps exactly p positions hands the head this row (keep_row_at)
        self._end_row: tuple[int, np.ndarray] | None = None
        self.skipped = 0  # tokens the head was never fed (a count, for stats and tests)
        self._own = np.zeros((self.n_heads + 17, self.n_embd), dtype=np.float32)  # head's own rows
        self._vocab_asked = 0
        self.vocab_size = 0  # the trimmed draft vocabulary's size (0: all tokens)

    @property
    def max_draft(self) -> int:  # type: ignore[override]  # set by the head count, read-only
        """Chained heads draft at most one token per head."""
        return self.n_heads if self.chained else 16

    def write_count(self) -> int:
        return self.ctx.write_count()

    def configure(self, spec: SpecConfig) -> None:
        """How several heads draft (spec.heads), and a trimmed draft vocabulary of
        spec.draft_vocab tokens where the model allows one (``vocab_size`` says what is used;
        0: the whole vocabulary)."""
        chained = self.n_heads > 1 and spec.heads == "chain"
        if chained != self.chained:
            self.reset()  # the heads' KV layers were fed for the other way
            self.chained = chained
        n = spec.draft_vocab if spec.draft_vocab < self.ctx.n_vocab else 0
        if n == self._vocab_asked:
            return
        self._vocab_asked = n
        trimmed = bool(n) and not self.chained
        shared = self.ctx.ctx  # the DraftContext itself, behind a view
        if trimmed and shared.vocab_asked == n:
            # set and probed (or refused) for a drafter before this one: a Session makes a new
            # drafter at each switch from plain decoding, and probing again costs a head decode
            self.vocab_size = self.ctx.vocab_size
            return
        self.ctx.set_vocab([])
        self.vocab_size = 0
        if trimmed:
            self._set_vocab(n)
            shared.vocab_asked = n

    def _set_vocab(self, n: int) -> None:
        """Trim the draft vocabulary to the n most frequent tokens where the graph serves it."""
        try:
            self.ctx.set_vocab(frequent_tokens(self.ctx.model, n))
        except UnsupportedError:
            return
        if self._probe():
            self.vocab_size = self.ctx.vocab_size
        else:
            self.ctx.set_vocab([])

    def _probe(self) -> bool:
        """Whether this model's MTP graph serves a trimmed vocabulary: one decode at the first
        free position of the draft KV (removed again)."""
        pos = self.ctx.pos_max() + 1
        if pos >= self.ctx.n_ctx:
            return False
        try:
            _decode_parts(
                self.ctx.ctx, [(self.ctx.seq_id, [0], np.zeros((1, self.n_embd), dtype=np.float32), pos)], outputs=True
            )
            return True
        except UnsupportedError:
            return False
        finally:
            self.ctx.seq_rm(pos)

    def reset(self) -> None:
        """Forget everything fed so far (a new text, or a step that failed half-way)."""
        if self.n_heads > 1:
            self.ctx.set_head(0)
        self.rollback.trim(0)
        self._feed.clear()
        self._has_pending = False
        self._kv_end = 0
        self._shift, self._gap_at, self._step_run = 0, None, 0
        self._end_row = None

    def keep_row_at(self, pos: int) -> None:
        """The text's prompt ends at pos: remember the pending row (the target's row of pos - 1,
        which pairs with the token at pos). A later prompt that keeps exactly pos positions (the
        same prompt again: a retry, another sample, the bench's repeats) then hands it to the head
        instead of having the target decode pos - 1 again (one trunk decode a start: 27-32 ms on
        the ~1.5B echo fixture, tools/bench_anatomy.py)."""
        n = len(self._feed)
        ok = self._has_pending and self._gap_at is None and self._kv_end + n == pos
        self._end_row = (pos, self._rows[n].copy()) if ok else None

    def truncate(self, n_keep: int) -> int:
        """Keep at most the first n_keep positions of the draft KV; returns how many it kept
        (positions queued but not yet fed are fed first when the cut keeps them). The next
        observe() must start at position kept - 1, whose hidden row pairs with the token at kept
        (unless row_before_cut is False: a cut at a prompt's end, whose row keep_row_at kept)."""
        if n_keep > self._kv_end and self._feed:
            self._flush(skip=False)  # queued by plain steps (k = 0 drafts nothing): keep them too
        kept = min(n_keep, self._kv_end)
        gap = self._gap_at
        self.row_before_cut = True
        if gap is not None and kept >= gap and kept - self._shift < gap:
            # the cut falls inside the skipped positions: the gap now ends at the cut, so the
            # target keeps its whole prefix. (Cutting back to the gap made the target decode
            # its text again from there: after a generation of plain steps, whose probes skip
            # the prompt, a Batch's text that repeated the last prompt of its slot prefilled
            # it whole, 22-63 ms a text against 0.1-0.5 ms without a head; 4 texts of 48
            # tokens, the default model: 6% of the time.)
            # The token at the cut is skipped too, so the target need not decode the position
            # before it again to hand its row over (13-16 ms a text in a Batch of 4).
            self._shift = kept - gap
            self.row_before_cut = kept == 0
            if self._shift == 0:
                self._gap_at = None
        elif gap is not None and kept - self._shift < gap:
            # the cut falls below the gap: keep what lies below it, where the positions are
            # the target's
            self._shift, self._gap_at = 0, None
        self.rollback.trim(kept - self._shift)
        self._kv_end = kept
        self._feed.clear()
        self._step_run = 0
        self._has_pending = False
        end, self._end_row = self._end_row, None
        if end is not None and gap is None and kept >= end[0]:
            self._end_row = end  # the text before the prompt's end is kept: its row still holds
            if kept == end[0] and self.row_before_cut:
                self._rows[0] = end[1]  # the pending row, as the prompt's prefill left it
                self._has_pending = True
                self.row_before_cut = False
        return kept

    def save(self) -> HeadState:
        """The head's state at the end of the text (the queue is fed first: the next draft
        would feed it anyway)."""
        self._flush(skip=False)
        pending = self._rows[0].copy() if self._has_pending else None
        return HeadState(self.ctx.get_state(), self._kv_end, pending, self._shift, self._gap_at, self._end_row)

    def load(self, saved: HeadState) -> None:  # type: ignore[override]  # what its own save() gave
        if self.n_heads > 1:
            self.ctx.set_head(0)
        self.ctx.set_state(saved.kv)
        self._feed.clear()
        self._kv_end = saved.kv_end
        self._shift, self._gap_at, self._step_run = saved.shift, saved.gap_at, 0
        self._end_row = saved.end_row
        self._has_pending = saved.pending is not None
        if self._has_pending:
            self._rows[0] = saved.pending

    # ---- hand-off --------------------------------------------------------------------

    def observe(self, tokens: list[int], pos0: int, hidden: np.ndarray) -> None:  # type: ignore[override]  # wants_hidden
        """The target's KV gained `tokens` at pos0.. with these hidden rows.

        Queues each token with the hidden row one position earlier; the last
        row becomes the pairing row of the next token."""
        n_feed = n_before = len(self._feed)
        for i, tok in enumerate(tokens):
            pos = pos0 + i
            if pos < self._kv_end:
                continue  # already in the draft KV (fed while drafting)
            if i == 0 and not self._has_pending:
                if pos > 0 and self._kv_end - self._shift > 0:
                    # no row pairs with this token (a cut inside the skipped positions, whose row
                    # before it the target did not decode again): skipped too, and the gap closed
                    # behind what the head holds (an empty head starts anew, as at position 0)
                    if self._gap_at is None:
                        self._gap_at = self._kv_end - self._shift
                    self._shift += pos + 1 - self._kv_end
                self._kv_end = pos + 1  # position 0 has no earlier hidden row: the head starts at 1
                continue
            if n_feed + 1 >= len(self._rows):
                self._flush()
                n_feed = 0
            self._feed.append(tok)
            if i > 0:
                self._rows[n_feed] = hidden[i - 1]
            n_feed += 1
        # _rows[n_feed] is the pending row; for i == 0 the old pending row already sits there.
        self._rows[n_feed] = hidden[len(tokens) - 1]
        self._has_pending = True
        # a plain step hands off one token (a prompt or a draft step, more): the head may skip
        # plain steps' tokens but the last CATCH_UP_KEEP
        self._step_run = self._step_run + max(0, n_feed - n_before) if len(tokens) == 1 else 0
        self._step_run = min(self._step_run, n_feed)

    def _skip_missed(self) -> None:
        """After more than CATCH_UP_KEEP plain steps, drop the queued tokens but the last
        CATCH_UP_KEEP (the gap is closed: see the module docstring). The prompt goes too when it
        is still queued: on the default model the drafts after plain steps were accepted as often
        without it as with every token fed (0.53 at the first position), and less often (0.46)
        with the prompt fed and the plain steps' tokens skipped; feeding it made the first draft
        3x dearer (bench/results/policy-auto/round5/skip_prompt.txt)."""
        if self._step_run <= CATCH_UP_KEEP:
            return
        n = len(self._feed)
        n_skip = n - CATCH_UP_KEEP
        if self._gap_at is None:
            self._gap_at = self._kv_end
        # each token's row moves with it (the pending row, at n, too)
        self._rows[: n - n_skip + 1] = self._rows[n_skip : n + 1]
        del self._feed[:n_skip]
        # the queue's first token keeps its head position kv_end - shift
        self._kv_end += n_skip
        self._shift += n_skip
        self._step_run = CATCH_UP_KEEP
        self.skipped += n_skip

    def _flush(self, skip: bool = True) -> None:
        """Feed the queued tokens to the draft KV (every head) without drafting (skip: but those
        of plain steps that _skip_missed drops)."""
        if skip:
            self._skip_missed()
        n = len(self._feed)
        if n == 0:
            return
        for head in range(self.n_heads if self.chained else 1):
            if self.chained:
                # Each head writes only its own KV layer, so the positions are decoded once
                # per head; seq_rm frees the cells and the next head refills the same ones.
                self.ctx.set_head(head)
                if head > 0:
                    self.ctx.seq_rm(self._kv_end - self._shift)
            # no logits: these rows only fill the KV
            _decode_parts(self.ctx.ctx, [self._queue_rows()], outputs=False)
        self.queue_fed()

    # ---- drafting ----------------------------------------------------------------------

    def propose(
        self, last_token: int, n_past: int, k: int, sampler: Sampler, history: list[int], p_min: float = 0.0
    ) -> Draft:
        """Draft up to k tokens that follow last_token (at position n_past): this text alone,
        through the same batched drafting as a batch (a batch of one)."""
        return draft_all([self], [DraftRequest(last_token, n_past, k, sampler, history, p_min)])[0]

    def plan(self, request: DraftRequest) -> Draft | HeadJob:
        if not self._has_pending or request.k <= 0:
            return Draft()  # nothing pairs with the last token yet
        if self.chained:
            return self._propose_chained(request)
        self._skip_missed()
        return HeadJob(self, request, self)

    def _first_rows(self, last_token: int) -> tuple[int, list[int], np.ndarray, int]:
        """The first draft decode's part: (seq_id, the queue plus last_token, one hidden row
        each, first position); the head's prediction comes from its last row."""
        tokens = self._feed + [last_token]
        return self.ctx.seq_id, tokens, self._rows[: len(tokens)], self._kv_end - self._shift

    def _queue_rows(self) -> tuple[int, list[int], np.ndarray, int]:
        n = len(self._feed)
        return self.ctx.seq_id, list(self._feed), self._rows[:n], self._kv_end - self._shift

    def queue_fed(self) -> None:
        """The queued tokens are in the draft KV now."""
        n = len(self._feed)
        self._kv_end += n
        self._rows[0] = self._rows[n]
        self._feed.clear()
        self._step_run = 0

    def head_pos(self, pos: int) -> int:
        """Where the target's position pos (at or past the queue) sits in the head's KV."""
        return pos - self._shift

    def _first_fed(self, n_past: int) -> None:
        self._feed.clear()
        self._step_run = 0
        self._kv_end = n_past + 1

    def _draft_done(self, n_past: int, k: int, draft: Draft) -> None:
        if k > 1 and draft.tokens:
            # Rows past last_token hold the head's own hidden rows, not the target's.
            self.rollback.trim(self.head_pos(n_past + 1))
        # The pending row (paired with last_token) is consumed; observe() sets the next.
        self._has_pending = False

    def _propose_chained(self, r: DraftRequest) -> Draft:
        self._flush()
        n_past, k = self.head_pos(r.n_past), min(r.k, self.n_heads)
        draft = Draft(q=None if r.sampler.config.greedy else Q_IN_SLOTS)
        self._own[0] = self._rows[0]
        tokens = [r.last_token]
        for i in range(k):
            self.ctx.set_head(i)
            self.ctx.seq_rm(n_past)
            _decode_parts(self.ctx.ctx, [(self.ctx.seq_id, tokens, self._own, n_past)], outputs=True)
            row = self.ctx.logits()[-1]
            if not _take(draft, row, r, _argmax(row[None, :])[0] if r.plain_greedy else None):
                break
            self._own[len(tokens)] = self.ctx.hidden()[0]
            tokens.append(draft.tokens[-1])
        self.ctx.set_head(0)
        self.rollback.trim(n_past)
        self._kv_end = r.n_past
        # last_token is not fed: observe() queues it with the old pending row.
        return draft


def draft_with_heads(jobs: list[HeadJob]) -> list[Draft]:
    """Single-head MTP drafts of the texts of one draft context, made together: one draft
    decode per draft position carries every text's rows (when every text is greedy, the whole
    recursion is one native call)."""
    drafters = [j.drafter for j in jobs]
    ctx = drafters[0].ctx.ctx
    if any(d.ctx.ctx is not ctx for d in drafters):
        raise ValueError("drafts made together must share one draft context")
    reqs = [j.request for j in jobs]
    ks = [r.k for r in reqs]
    drafts = [Draft(q=None if r.sampler.config.greedy else Q_IN_SLOTS) for r in reqs]
    # Drafts longer than one token need the head's hidden row of the last token, and a
    # masked nextn decode returns its first rows: feed the queues first, then decode the
    # long drafts' last tokens first in the batch.
    longer = [i for i, k in enumerate(ks) if k > 1]
    _feed_queues(ctx, [drafters[i] for i in longer])
    order = longer + [i for i, k in enumerate(ks) if k == 1]
    if sum(len(drafters[i]._feed) + 1 for i in order) > ctx.n_batch:
        # long queues (prompts admitted together) would overflow one decode: feed them first
        _feed_queues(ctx, [drafters[i] for i in order])
    _decode_parts(ctx, [drafters[i]._first_rows(reqs[i].last_token) for i in order], outputs=True)
    for i in order:
        drafters[i]._first_fed(reqs[i].n_past)
    if all(r.plain_greedy for r in reqs):
        # every recursion in one native call: argmax, own hidden row, one decode per position
        _draft_greedy(ctx, [drafters[i] for i in order], [reqs[i] for i in order], [drafts[i] for i in order])
    else:
        own = ctx.hidden()[: len(longer)]  # the long drafts' last-token rows
        own_of = {i: own[n].copy() for n, i in enumerate(longer)}
        going = _choose(ctx, reqs, order, drafts)
        for depth in range(1, max(ks)):
            going = [i for i in going if depth < ks[i]]
            if not going:
                break
            _decode_parts(
                ctx,
                [
                    (
                        drafters[i].ctx.seq_id,
                        [drafts[i].tokens[-1]],
                        own_of[i][None, :],
                        drafters[i].head_pos(reqs[i].n_past + depth),
                    )
                    for i in going
                ],
                outputs=True,
            )
            if any(depth + 1 < ks[i] for i in going):
                hid = ctx.hidden()  # one row per part, in order
                own_of = {i: hid[n].copy() for n, i in enumerate(going)}
            going = _choose(ctx, reqs, going, drafts)
    for d, r, draft in zip(drafters, reqs, drafts):
        d._draft_done(r.n_past, r.k, draft)
    return drafts


def _draft_greedy(ctx: DraftContext, drafters: list[MTPDrafter], reqs: list[DraftRequest], drafts: list[Draft]) -> None:
    """Greedy recursions of the texts whose predictions are the last decode's rows, in order."""
    n = len(reqs)
    n_max = np.array([r.k for r in reqs], dtype=np.int32)
    ids = np.empty((n, int(n_max.max())), dtype=np.int32)
    probs = np.empty(ids.shape, dtype=np.float32)
    n_out = np.empty(n, dtype=np.int32)
    ctx.draft_greedy(
        np.array([d.ctx.seq_id for d in drafters], dtype=np.int32),
        np.array([d.head_pos(r.n_past + 1) for d, r in zip(drafters, reqs)], dtype=np.int32),
        n_max,
        np.array([r.p_min for r in reqs], dtype=np.float32),
        ids,
        probs,
        n_out,
    )
    for r, draft in enumerate(drafts):
        draft.tokens = ids[r, : n_out[r]].tolist()
        draft.confidence = probs[r, : n_out[r]].tolist()


def _feed_queues(ctx: DraftContext, drafters: list[MTPDrafter]) -> None:
    """Feed the head the accepted tokens it has not seen, in decodes of at most n_batch rows."""
    parts = [d._queue_rows() for d in drafters if d._feed]
    if parts:
        _decode_parts(ctx, parts, outputs=False)
        for d in drafters:
            d.queue_fed()


def _decode_parts(ctx: DraftContext, parts, *, outputs: bool) -> None:
    """Draft decode of (seq_id, tokens, hidden rows, first position) parts; with outputs, one
    decode with logits for each part's last row, without, as many decodes as n_batch needs."""
    tokens: list[int] = []
    pos: list[int] = []
    seqs: list[int] = []
    flags: list[int] = []
    for seq, toks, _, p0 in parts:
        tokens += toks
        pos += range(p0, p0 + len(toks))
        seqs += [seq] * len(toks)
        flags += [0] * (len(toks) - 1) + [1 if outputs else 0]
    if len(parts) == 1:
        hidden = np.ascontiguousarray(parts[0][2][: len(tokens)])
    else:
        hidden = np.concatenate([h[: len(t)] for _, t, h, _ in parts])  # float32 rows, one array
    flags_arr = np.array(flags, dtype=np.uint8)
    step = len(tokens) if outputs else ctx.n_batch
    for a in range(0, len(tokens), step):
        b = a + step
        ctx.decode_rows(tokens[a:b], pos[a:b], seqs[a:b], output=flags_arr[a:b], hidden=hidden[a:b])


def _argmax(rows: np.ndarray) -> list[tuple[int, float]]:
    """(argmax, its softmax probability) of each row: one native call for all rows."""
    n = rows.shape[0]
    ids, probs = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.float32)
    lib.pymtp_rows_argmax(
        ffi.from_buffer("float[]", rows),
        n,
        rows.shape[1],
        ffi.from_buffer("int32_t[]", ids),
        ffi.from_buffer("float[]", probs),
    )
    return list(zip(ids.tolist(), probs.tolist()))


def _choose(ctx: DraftContext, reqs: list[DraftRequest], order: list[int], drafts: list[Draft]) -> list[int]:
    """Each drafting text picks its next token from its row of the last draft decode (greedy
    ones from one native argmax over all rows, sampling ones from their own sampler); returns
    the ones that drafted a token."""
    logits = ctx.logits()
    greedy = _argmax(logits) if any(reqs[i].plain_greedy for i in order) else None
    return [
        i
        for r, i in enumerate(order)
        if _take(drafts[i], logits[r], reqs[i], greedy[r] if greedy and reqs[i].plain_greedy else None)
    ]


def _take(draft: Draft, row: np.ndarray, r: DraftRequest, greedy: tuple[int, float] | None) -> bool:
    """Choose the next draft token from a row of the head's logits (greedy: its argmax and
    probability, computed already); False to stop. In sampling mode its q stays in the
    sampler's slot for its position; under a constraint the row is masked, and the token
    advances the constraint tentatively."""
    if greedy is not None:
        tok, conf = greedy
    else:
        mask = r.constraint.draft_mask(len(draft.tokens)) if r.constraint is not None else None
        tok, conf = r.sampler.row(len(draft.tokens), row, r.history, draft.tokens, mask=mask)
    if tok < 0 or conf < r.p_min:  # -1: the head has no allowed token here
        return False
    if r.constraint is not None:
        r.constraint.drafted(tok)
    draft.tokens.append(tok)
    draft.confidence.append(conf)
    return True
