"""The MTP drafter: proposes tokens with the model's own MTP head(s).

Hand-off rule: the head at position p takes token x(p) paired with the
target's hidden row h(p-1). The drafter keeps its context's KV in step with
the accepted text: every token the target accepts is fed to the head with the
hidden row one position earlier, lazily, in the same decode as the next draft.

Two modes:
* one head (glm4moe, qwen35, deepseek...): a one-token draft is one decode of the
  not-yet-fed accepted tokens plus the last token; a longer draft feeds the queue
  first and decodes the last token alone (its hidden row seeds the recursion, and
  llama.cpp's masked nextn rows are a decode's first rows), then the head recurses
  on its own hidden output, one token per call;
* chained heads (step35): head i drafts token i+1; each head keeps its own
  KV layer, so accepted tokens are fed once per head, and draft step i
  re-decodes the drafted prefix with head i (as llama.cpp's driver does).

The policies that size each draft live in pymtp.policy (DraftPolicy is imported here for
older code).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._native import ffi, lib
from .config import SpecConfig
from .draft_vocab import frequent_tokens
from .errors import UnsupportedError
from .model import DraftContext, last_row_only
from .policy import DraftPolicy  # noqa: F401  (moved to pymtp.policy)
from .rollback import KVTrim
from .sampling import Sampler


@dataclass
class Draft:
    """Tokens a drafter proposes and the head's top probability for each. In sampling mode
    the verifier needs each token's q, the distribution it was drawn from: either the
    sampler's slots hold them (``q_in_sampler``: drafters that called ``Sampler.row`` or
    ``Sampler.point_masses``), or ``probs`` lists them as vocabulary-sized arrays."""

    tokens: list[int] = field(default_factory=list)
    probs: list[np.ndarray] | None = None
    confidence: list[float] = field(default_factory=list)
    q_in_sampler: bool = False


@dataclass
class HeadState:
    """MTPDrafter.save(): the head's KV (bytes of its context), how far it reaches, and the
    pending hidden row that pairs with the token at kv_end (None: no row yet)."""

    kv: np.ndarray
    kv_end: int
    pending: np.ndarray | None


class Drafter:
    """What MTPSpeculator asks of a drafter. Write one by overriding propose(); the rest has
    defaults for drafters that keep no state of their own.

    * ``propose(last_token, n_past, k, sampler, history, p_min)``: up to k tokens to follow
      last_token (at position n_past; history ends with it), as a Draft; in sampling mode
      with each token's q distribution (see Draft; a point mass is fine: exact too);
    * ``observe(tokens, pos0, hidden)``: the target accepted these tokens at pos0.. (hidden:
      its hidden rows when ``wants_hidden``, else None);
    * ``accepted(n_drafted, n_accepted)``: how the last draft fared;
    * ``reset()`` / ``truncate(n_keep)``: forget everything / keep the first n_keep positions
      (returns how many it kept); ``write_count()``: changes to its own cache, if it has one;
      ``configure(spec)``: the SpecConfig of the generations that follow;
    * ``save()`` / ``load(saved)``: its state at the end of the text, to resume that text
      later (a cached conversation); drafters that keep none return None.
    """

    max_draft = 16
    wants_hidden = False
    last_source = ""          # who proposed the last draft, for the statistics per source
    vocab_size = 0            # tokens a trimmed MTP head scores (0: all, or not an MTP head)
    verify_cost = None        # set by the speculator: k -> measured seconds of a k-token verify (or None)

    def propose(self, last_token: int, n_past: int, k: int, sampler: Sampler, history: list[int],
                p_min: float = 0.0) -> Draft:
        raise NotImplementedError

    def observe(self, tokens: list[int], pos0: int, hidden: np.ndarray | None) -> None:
        pass

    def reset(self) -> None:
        pass

    def accepted(self, n_drafted: int, n_accepted: int) -> None:
        """The outcome of the last draft (for drafters that adapt to it)."""

    def configure(self, spec: SpecConfig) -> None:
        pass

    def truncate(self, n_keep: int) -> int:
        return n_keep

    def write_count(self) -> int:
        return 0

    def save(self) -> object:
        return None

    def load(self, saved: object) -> None:
        self.reset()


class MTPDrafter(Drafter):
    """Drives a DraftContext. See the module docstring for the hand-off rule."""

    wants_hidden = True
    last_source = "mtp"

    def __init__(self, draft: DraftContext) -> None:
        self.ctx = draft
        self.rollback = KVTrim(draft)     # the head's own drafted rows are dropped after a draft
        model = draft.model
        self.n_embd = model.n_embd
        self.n_heads = max(1, model.n_mtp_layers)
        self.chained = self.n_heads > 1      # SpecConfig.heads "chain" (configure may switch it off)
        # Accepted tokens not yet in the draft KV, and the hidden row each pairs with;
        # the row after the last of them (`pending`) pairs with the newest token.
        cap = draft.n_batch + 1
        self._rows = np.zeros((cap, self.n_embd), dtype=np.float32)
        self._feed: list[int] = []
        self._has_pending = False
        self._kv_end = 0                   # the draft KV holds positions < kv_end
        self._own = np.zeros((self.n_heads + 17, self.n_embd), dtype=np.float32)  # head's own rows
        self._draft_ids = ffi.new("int32_t[64]")
        self._draft_probs = ffi.new("float[64]")
        self._vocab_asked = 0
        self.vocab_size = 0                # the trimmed draft vocabulary's size (0: all tokens)
        self._argmax_id = ffi.new("int32_t[1]")
        self._argmax_p = ffi.new("float[1]")

    @property
    def max_draft(self) -> int:
        """Chained heads draft at most one token per head."""
        return self.n_heads if self.chained else 16

    def write_count(self) -> int:
        return self.ctx.n_writes

    def configure(self, spec: SpecConfig) -> None:
        """How several heads draft (spec.heads), and a trimmed draft vocabulary of
        spec.draft_vocab tokens where the model allows one (``vocab_size`` says what is used;
        0: the whole vocabulary)."""
        chained = self.n_heads > 1 and spec.heads == "chain"
        if chained != self.chained:
            self.reset()                 # the heads' KV layers were fed for the other way
            self.chained = chained
        n = spec.draft_vocab if spec.draft_vocab < self.ctx.n_vocab else 0
        if n == self._vocab_asked:
            return
        self._vocab_asked = n
        self.ctx.set_vocab([])
        self.vocab_size = 0
        if n and not self.chained:
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
            self.ctx.decode([0], pos, np.zeros(self.n_embd, dtype=np.float32), output=np.ones(1, np.uint8))
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

    def truncate(self, n_keep: int) -> int:
        """Keep at most the first n_keep positions of the draft KV; returns how many it kept
        (positions queued but not yet fed are dropped). The next observe() must start at
        position kept - 1, whose hidden row pairs with the token at kept."""
        kept = min(n_keep, self._kv_end)
        self.rollback.trim(kept)
        self._kv_end = kept
        self._feed.clear()
        self._has_pending = False
        return kept

    def save(self) -> HeadState:
        """The head's state at the end of the text (the queue is fed first: the next draft
        would feed it anyway)."""
        self._flush()
        return HeadState(self.ctx.get_state(), self._kv_end, self._rows[0].copy() if self._has_pending else None)

    def load(self, saved: HeadState) -> None:
        if self.n_heads > 1:
            self.ctx.set_head(0)
        self.ctx.set_state(saved.kv)
        self._feed.clear()
        self._kv_end = saved.kv_end
        self._has_pending = saved.pending is not None
        if self._has_pending:
            self._rows[0] = saved.pending

    # ---- hand-off --------------------------------------------------------------------

    def observe(self, tokens: list[int], pos0: int, hidden: np.ndarray) -> None:
        """The target's KV gained `tokens` at pos0.. with these hidden rows.

        Queues each token with the hidden row one position earlier; the last
        row becomes the pairing row of the next token."""
        n_feed = len(self._feed)
        for i, tok in enumerate(tokens):
            pos = pos0 + i
            if pos < self._kv_end:
                continue          # already in the draft KV (fed while drafting)
            if i == 0 and not self._has_pending:
                self._kv_end = pos + 1    # position 0 has no earlier hidden row: the head starts at 1
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

    def _flush(self) -> None:
        """Feed the queued tokens to the draft KV (every head) without drafting."""
        n = len(self._feed)
        if n == 0:
            return
        out = np.zeros(n, dtype=np.uint8)       # no logits: these rows only fill the KV
        for head in range(self.n_heads if self.chained else 1):
            if self.chained:
                # Each head writes only its own KV layer, so the positions are decoded once
                # per head; seq_rm frees the cells and the next head refills the same ones.
                self.ctx.set_head(head)
                if head > 0:
                    self.ctx.seq_rm(self._kv_end)
            self.ctx.decode(self._feed, self._kv_end, self._rows[0], self._rows[1:n], output=out)
        self.queue_fed()

    # ---- drafting ----------------------------------------------------------------------

    def propose(self, last_token: int, n_past: int, k: int, sampler: Sampler, history: list[int],
                p_min: float = 0.0) -> Draft:
        """Draft up to k tokens that follow last_token (at position n_past)."""
        if not self._has_pending or k <= 0:
            return Draft()
        if self.chained:
            return self._propose_chained(last_token, n_past, min(k, self.n_heads), sampler, history, p_min)
        draft = Draft(q_in_sampler=not sampler.config.greedy)
        if k > 1:
            # The recursion needs the hidden row of last_token, but in llama.cpp's masked nextn
            # mode a decode returns the first rows of the batch (many MTP graphs, glm4moe's
            # among them, keep every row of h_nextn), so last_token is decoded on its own.
            self._flush()
        # One call: the queued accepted tokens (if any) plus last_token, output on the last row only.
        tokens, rows, pos0 = self.draft_inputs(last_token)
        n = len(tokens)
        self.ctx.decode(tokens, pos0, rows[0], rows[1:n], output=last_row_only(n))
        self.inputs_fed(n_past)
        if sampler.plain_greedy:
            # the whole recursion in one native call: argmax, own hidden row, next decode
            n_out = self.ctx.draft_greedy(n_past + 1, k, p_min, self._draft_ids, self._draft_probs)
            draft.tokens = list(self._draft_ids[0:n_out])
            draft.confidence = list(self._draft_probs[0:n_out])
        else:
            self._recurse(draft, n_past, k, sampler, history, p_min)
        self.draft_done(n_past, k, draft)
        return draft

    # The pieces of a single-head draft, also used by batched drafting (pymtp.batch): a
    # decode of draft_inputs() (after queue_inputs() was decoded and queue_fed(), when the
    # draft is longer than one token), then inputs_fed(), the recursion, then draft_done().

    def can_draft(self) -> bool:
        """Whether a draft can start: the row pairing with the last token is here."""
        return self._has_pending

    def queue_inputs(self) -> tuple[list[int], np.ndarray, int]:
        """The queued accepted tokens, their hidden rows (one per token) and the first position."""
        n = len(self._feed)
        return list(self._feed), self._rows[:n], self._kv_end

    def queue_fed(self) -> None:
        n = len(self._feed)
        self._kv_end += n
        self._rows[0] = self._rows[n]
        self._feed.clear()

    def draft_inputs(self, last_token: int) -> tuple[list[int], np.ndarray, int]:
        """The first draft decode's rows: the queue plus last_token, one hidden row each, and
        the first position (the head's prediction comes from the last row)."""
        tokens = self._feed + [last_token]
        return tokens, self._rows[:len(tokens)], self._kv_end

    def inputs_fed(self, n_past: int) -> None:
        self._feed.clear()
        self._kv_end = n_past + 1

    def draft_done(self, n_past: int, k: int, draft: Draft) -> None:
        if k > 1 and draft.tokens:
            # Rows past last_token hold the head's own hidden rows, not the target's.
            self.rollback.trim(n_past + 1)
        # The pending row (paired with last_token) is consumed; observe() sets the next.
        self._has_pending = False

    def take(self, draft: Draft, row: np.ndarray, sampler: Sampler, history: list[int], p_min: float,
             greedy: tuple[int, float] | None = None) -> bool:
        """Choose the next draft token from a row of the head's logits (greedy: its argmax and
        probability, computed already); False to stop. In sampling mode its q stays in the
        sampler's slot for its position."""
        if greedy is not None and sampler.plain_greedy:
            tok, conf = greedy
        else:
            tok, conf = sampler.row(len(draft.tokens), row, history, draft.tokens)
        if tok < 0 or conf < p_min:        # -1: the head has no allowed token here
            return False
        draft.tokens.append(tok)
        draft.confidence.append(conf)
        return True

    def _recurse(self, draft: Draft, n_past: int, k: int, sampler: Sampler, history: list[int],
                 p_min: float) -> None:
        """Draft token by token, each decoded with the head's own hidden row (sampling,
        penalties, bias: each choice is one native sampler call)."""
        for i in range(k):
            if i > 0:
                self.ctx.decode([draft.tokens[-1]], n_past + i, self._own[i - 1])
            if not self._take(draft, sampler, history, p_min):
                break
            if i + 1 < k:
                self._own[i] = self.ctx.hidden()[0]

    def _propose_chained(self, last_token: int, n_past: int, k: int, sampler: Sampler, history: list[int],
                         p_min: float) -> Draft:
        self._flush()
        draft = Draft(q_in_sampler=not sampler.config.greedy)
        self._own[0] = self._rows[0]
        tokens = [last_token]
        for i in range(k):
            self.ctx.set_head(i)
            self.ctx.seq_rm(n_past)
            self.ctx.decode(tokens, n_past, self._own[0], self._own[1:len(tokens)], output=last_row_only(len(tokens)))
            if not self._take(draft, sampler, history, p_min):
                break
            self._own[len(tokens)] = self.ctx.hidden()[0]
            tokens.append(draft.tokens[-1])
        self.ctx.set_head(0)
        self.rollback.trim(n_past)
        self._kv_end = n_past
        # last_token is not fed: observe() queues it with the old pending row.
        return draft

    def _take(self, draft: Draft, sampler: Sampler, history: list[int], p_min: float) -> bool:
        """take() on the head's last logits row."""
        row = self.ctx.logits()[-1]
        greedy = None
        if sampler.plain_greedy:
            lib.pymtp_rows_argmax(ffi.from_buffer("float[]", row), 1, row.shape[0], self._argmax_id, self._argmax_p)
            greedy = int(self._argmax_id[0]), float(self._argmax_p[0])
        return self.take(draft, row, sampler, history, p_min, greedy)
