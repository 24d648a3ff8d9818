"""MTPSpeculator: the draft -> verify -> accept / rollback loop, one step at a time.

Transition table (``state`` after each call):

    =========  ==================  =========  ==============================================
    state      call                next       what happens
    =========  ==================  =========  ==============================================
    IDLE       start(prompt)       READY      clear both KV caches; prefill the target with the
                                              prompt minus its last token, queue its hidden
                                              rows for the draft head (hand-off)
    READY      step()              READY      DRAFT  up to k tokens from the MTP head (k from the
                                                     DraftPolicy; 0 = a plain decode step)
                                              VERIFY one target decode of [last, d1..dk] (a
                                                     checkpoint context marks its state first)
                                              ACCEPT the sampling rule keeps d1..dn, then adds
                                                     the target's own next token
                                              HANDOFF queue accepted tokens with their hidden rows
                                                     for the draft head (before ROLLBACK: a
                                                     checkpoint re-decode replaces the rows)
                                              ROLLBACK trim the target to the accepted positions
                                                     (pymtp.rollback: KV trim, n_rs_seq
                                                     snapshot, or checkpoint + re-decode)
                                              POLICY  record acceptance, adapt k, cooldown
    READY      step() raises       READY      the target is trimmed back to n_past and the
                                              draft head restarts: the text is unchanged
    READY      start(prompt)       READY      a new generation on the same contexts
    any        close()             CLOSED
    =========  ==================  =========  ==============================================

Invariant between steps: the target KV holds ``tokens[:-1]`` (n_past positions)
and ``tokens[-1]`` is the last accepted token, not yet decoded.
Nothing lives in globals: a notebook or an agent can drive ``step()`` itself.
"""

from __future__ import annotations

import enum
import time
from typing import cast

import numpy as np

from . import engine
from .config import SamplingConfig, SpecConfig
from .constraint_state import ConstraintState
from .drafter import Draft, Drafter
from .errors import PymtpError, UnsupportedError
from .model import DraftContext, TargetContext, last_row_only
from .mtp_drafter import HeadState, MTPDrafter
from .policy import make_policy
from .prompt_cache import PromptCache, PromptMark, SavedText, usable_prefix
from .rollback import rollback_for
from .sampling import LogitsProcessor, Sampler, TokenConstraint
from .stats import SpecStats, StepResult

#: A prompt that cuts the live text saves it first when the cut loses this many positions (or
#: half the text): not when a few generated tokens go (sampling the same prompt again and again).
STASH_MIN_LOST = 32


class State(enum.Enum):
    IDLE = "idle"
    READY = "ready"
    CLOSED = "closed"


class MTPSpeculator:
    """Speculative decoding with a model's MTP head (or another Drafter) as the draft model.

    target: the trunk's context. draft: a DraftContext bound to it (the MTP head), any
    pymtp.drafter.Drafter (e.g. pymtp.lookup.PromptLookupDrafter), or None for plain
    decoding. See the module docstring for the state machine.
    """

    def __init__(
        self,
        target: TargetContext,
        draft: DraftContext | Drafter | None = None,
        sampling: SamplingConfig | None = None,
        spec: SpecConfig | None = None,
        *,
        batch_rows: int = 0,
    ) -> None:
        self.target = target
        self.batch_rows = batch_rows  # in a Batch: the most verify rows of all its sequences (costs shared)
        self.model = target.model
        # The MTP head's context, or any Drafter (prompt lookup, your own); None: plain decoding
        self.drafter = MTPDrafter(draft) if isinstance(draft, DraftContext) else draft
        self.sampling = sampling or SamplingConfig()
        self.constraint: ConstraintState | None = None  # the text's constraint while it generates
        self.logprobs, self.top_logprobs = False, 0  # what each verify reports besides the tokens
        self.configure(spec or SpecConfig())
        self.tokens: list[int] = []
        self.n_past = 0
        self.stats = SpecStats()
        self.state = State.IDLE
        self._writes = (-1, -1)  # the contexts' write counts when this speculator left them
        self._mark: PromptMark | None = None  # hybrids: the recurrent state at the end of the prompt
        self.cache: PromptCache | None = None  # saved texts of other conversations (a Session's)

    def configure(self, spec: SpecConfig) -> None:
        """Use these speculation settings from the next start() on."""
        self.spec = spec
        if self.drafter:
            self.drafter.configure(spec)  # first: it may change max_draft
        n_max = min(spec.n_draft, self.drafter.max_draft) if self.drafter else 0
        self.n_max_draft = n_max
        self.policy = (
            make_policy(
                spec,
                n_max,
                model=self.model,
                shared=self.batch_rows > 0,
                max_rows=self.batch_rows or n_max + 1,
                greedy=self.sampling.greedy,
                n_threads=self.target.n_threads,
            )
            if self.drafter
            else None
        )
        self.rollback = rollback_for(self.target, n_max)
        if self.drafter and self.policy is not None:
            self.drafter.verify_cost = self.policy.verify_cost  # for drafters that weigh costs
        sampler: Sampler | None = getattr(self, "sampler", None)  # None: the first configure() (__init__)
        if sampler is None or sampler.n_slots < n_max + 1:
            self.sampler = Sampler(self.sampling, n_slots=n_max + 1, n_vocab=self.model.n_vocab)  # q per position

    # ---- prefill ----------------------------------------------------------------------------

    def start(
        self,
        prompt: list[int],
        sampling: SamplingConfig | None = None,
        constraint: TokenConstraint | None = None,
        logits_processor: LogitsProcessor | None = None,
        logprobs: bool = False,
        top_logprobs: int = 0,
    ) -> None:
        """Begin a generation: prefill the prompt, reusing the cached prefix it shares with the
        text in the KV caches (see ``reusable_prefix``); the rest is decoded from there.
        constraint: masks every generated token (pymtp.grammar); logits_processor: changes every
        logits row in Python (see pymtp.sampling); logprobs: each StepResult carries the target's
        probability of every token it emits; top_logprobs=n: and the n likeliest tokens of each row."""
        if self.state is State.CLOSED:
            raise UnsupportedError("the speculator is closed")
        if not prompt:
            raise ValueError("the prompt is empty: give at least one token")
        if not isinstance(top_logprobs, int) or isinstance(top_logprobs, bool) or not 0 <= top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be an int in [0, 20], got {top_logprobs!r}")
        if len(prompt) >= self.target.n_ctx:
            raise ValueError(
                f"the prompt ({len(prompt)} tokens) does not fit the context "
                f"(n_ctx={self.target.n_ctx}); leave room for at least one new token"
            )
        if sampling is not None:
            self.sampling = sampling
        self.configure(self.spec)  # a fresh policy, and a rollback with no mark of an earlier text
        self.sampler.configure(self.sampling, logits_processor)  # and a fresh RNG from the seed
        self.constraint = (
            None if constraint is None else ConstraintState(constraint, self.model.n_vocab, self.sampler.n_slots)
        )
        self.logprobs, self.top_logprobs = logprobs or top_logprobs > 0, top_logprobs
        self.stats = SpecStats(n_prompt=len(prompt), draft_vocab=self.drafter.vocab_size if self.drafter else 0)
        t0 = time.perf_counter()
        keep, why = self._choose_text(prompt)
        self.state = State.IDLE  # until the prefill succeeds
        prompt = list(prompt)
        body = prompt[:-1]
        if self._mark is not None and keep == self._mark.n < self.n_past:
            self._resume_at_mark()  # a hybrid back at the end of its last prompt
        if keep == self.n_past and keep > 0:
            p0 = keep  # the prompt extends the cached text: decode the rest
        else:
            self._mark = None  # a new text, or one cut before its last prompt's end
            # Cut both caches back. The head at position p pairs x(p) with the target's
            # hidden row of p-1, so the target re-decodes one kept position to hand that
            # row over (only positions the draft KV already holds are kept).
            p0 = self.drafter.truncate(keep) if self.drafter else keep
            if self.drafter and self.drafter.wants_hidden and self.drafter.row_before_cut:
                p0 = max(0, p0 - 1)
            self.target.seq_rm(p0)  # a recurrent target gets here only with p0 == 0
            if self.drafter and p0 == 0:
                self.drafter.reset()
        self.tokens = prompt
        self.stats.n_reused = p0
        self.stats.reuse_miss = why
        self._prefill(body, p0, hand_off=True)
        self.n_past = len(body)
        if self.drafter:
            self.drafter.keep_row_at(self.n_past)  # the same prompt again needs no re-decode
        if self.model.is_recurrent and p0 < len(body):
            # the recurrent state exists here now and nowhere else: keep a copy for a later
            # prompt that shares this one but not what is generated next
            self._mark = PromptMark(self.n_past, self.target.get_state(partial=True), self._head_state())
        self.stats.t_prefill = time.perf_counter() - t0
        self.state = State.READY
        self._remember_writes()

    def _prefill(self, body: list[int], p0: int, hand_off: bool = False) -> None:
        """Decode body[p0:] at positions p0.. in batches (and hand the rows to the head)."""
        step = self.target.n_batch
        for c0 in range(p0, len(body), step):
            chunk = body[c0 : c0 + step]
            # no logits needed but the last row's: hidden rows come anyway
            self.target.decode(chunk, c0, output=last_row_only(len(chunk)))
            if hand_off and self.drafter:
                self.drafter.observe(chunk, c0, self._hidden())

    def _hidden(self) -> np.ndarray | None:
        return self.target.hidden() if self.drafter is not None and self.drafter.wants_hidden else None

    def _head_state(self) -> HeadState | None:
        """The drafter's state to keep with a text (an MTP head's; others keep none)."""
        return cast("HeadState | None", self.drafter.save()) if self.drafter else None

    def reusable_prefix(self, prompt: list[int]) -> tuple[int, str]:
        """How many leading positions of the target KV a new prompt can keep, and why not
        more ("" when all it shares). Only what this speculator itself left in the caches
        counts: any other write to either context since makes the whole cache unusable."""
        if not self._live():
            return 0, "no cached text" if not self.tokens else "the contexts were used by something else"
        return usable_prefix(
            self.tokens, self.n_past, self._mark, self.model.is_recurrent, prompt, self.target.min_cut()
        )

    def _live(self) -> bool:
        """Whether the contexts hold this speculator's text, as it left them."""
        return bool(self.tokens) and self.state is State.READY and self._writes == self._write_counts()

    # ---- saved texts (pymtp.prompt_cache) ------------------------------------------------------

    def _drafter_kind(self) -> str:
        return type(self.drafter).__name__ if self.drafter else ""

    def save(self) -> SavedText:
        """A copy of the live text's caches, to restore() later (another conversation may
        use the contexts meanwhile)."""
        if not self._live():
            raise UnsupportedError("no live text to save: start a generation first")
        text = SavedText(
            list(self.tokens),
            self.n_past,
            self.target.get_state(),
            self._head_state(),
            self._drafter_kind(),
            self._mark,
            self._saved_min_cut(),
        )
        self._remember_writes()  # the head's queue was fed
        return text

    def _saved_min_cut(self) -> int:
        """min_cut of the text once restored: llama.cpp saves only the positions inside the
        sliding window of the last one."""
        n_swa = self.model.n_swa
        return 0 if not n_swa or self.n_past <= n_swa else self.n_past

    def restore(self, text: SavedText) -> None:
        """Make a saved text the live one (its caches replace the contexts' contents)."""
        if text.drafter != self._drafter_kind():
            raise UnsupportedError(
                f"this text was saved by a speculator drafting with {text.drafter or 'nothing'}, "
                f"this one drafts with {self._drafter_kind() or 'nothing'}"
            )
        self.state = State.IDLE  # until both contexts hold it
        self.tokens, self.n_past, self._mark = [], 0, None
        if self.drafter:
            self.drafter.load(text.head)
        self.target.set_state(text.target)
        self.tokens, self.n_past, self._mark = list(text.tokens), text.n_past, text.mark
        self.configure(self.spec)  # no rollback mark of the text that was live
        self.state = State.READY
        self._remember_writes()

    def _resume_at_mark(self) -> None:
        """Roll a hybrid back to the end of its last prompt (the recurrent snapshot, the
        attention KV cut there, the head as it was)."""
        mark = self._mark
        assert mark is not None  # called when a prompt left one
        self.target.set_state(mark.recurrent, partial=True)
        self.target.seq_rm(mark.n)
        if self.drafter:
            self.drafter.load(mark.head)
        self.tokens, self.n_past = self.tokens[: mark.n + 1], mark.n

    def _choose_text(self, prompt: list[int]) -> tuple[int, str]:
        """Reuse the live text or a saved one, whichever the prompt shares more with; the
        live text is saved first when the prompt would cut it."""
        keep, why = self.reusable_prefix(prompt)
        if self.cache is None:
            return keep, why
        key, n = self.cache.best(prompt, self._drafter_kind(), self.model.is_recurrent)
        if key is not None and n > max(keep, 1):  # (a cut at 1 keeps nothing: the hand-off re-decodes it)
            text = self.cache.take(key)  # before the stash: the live text may cover it
            self.stash()
            self.restore(text)
            keep, why = self.reusable_prefix(prompt)
            self.stats.reused_saved = True
        elif self.n_past - keep >= min(STASH_MIN_LOST, (self.n_past + 1) // 2):
            if not self.stash():  # the cut loses a good part of the live text: keep it
                return 0, "the live text could not be saved"
        return keep, why

    def stash(self) -> bool:
        """Save the live text into the prompt cache (nothing when there is none to save).
        False when saving failed: the live text is then given up (a backend that failed
        reports itself at the next decode)."""
        if self.cache is not None and self.n_past > 0 and self._live():
            try:
                text = self.save()
            except PymtpError:
                self.tokens, self.n_past, self.state = [], 0, State.IDLE
                return False
            self.cache.put(text, self.model.is_recurrent)
        return True

    def _write_counts(self) -> tuple[int, int]:
        d = self.drafter.write_count() if self.drafter else 0
        return self.target.write_count(), d

    def _remember_writes(self) -> None:
        self._writes = self._write_counts()

    # ---- one step ------------------------------------------------------------------------------

    def room(self) -> int:
        """Positions left in the context for new tokens."""
        return self.target.n_ctx - self.n_past

    def step(self, max_new: int | None = None) -> StepResult:
        """Advance one speculative step: draft, verify, accept, roll back, hand off (the
        engine's step for a batch of one: pymtp.engine).

        max_new bounds the tokens this step may emit (drafts are sized so as
        not to waste work past it)."""
        return engine.step([self], [max_new])[0]

    def check_ready(self) -> None:
        if self.state is not State.READY:
            raise UnsupportedError(f"step() needs a started generation (state is {self.state.value})")
        if self.room() < 1:
            raise ValueError("the context is full")

    def draft_length(self, max_new: int | None, rows_before: int = 0, tokens_before: float = 0.0) -> int:
        """How many tokens to draft this step: the policy's choice, bounded by the room left
        in the context and the batch, and by max_new (in a Batch: beside rows_before rows of
        other sequences in the same verify, which yield tokens_before tokens)."""
        if self.policy is None:
            return 0  # plain decoding
        k: int = self.policy.next_length(self.n_past, rows_before, tokens_before)
        limit = min(self.room() - 1, self.target.n_batch - 1)
        if max_new is not None:
            limit = min(limit, max_new - 1)
        self.policy.asked = k = max(0, min(k, limit))  # (the policy learns what its cut drops of k)
        return k

    def settle(
        self, draft: Draft, logits: np.ndarray, hidden: np.ndarray | None, t0: float, t1: float, t2: float
    ) -> StepResult:
        """The rest of a step once the target has verified [last, d1..dk] at n_past (logits and
        hidden: this sequence's rows of that decode): ACCEPT, HANDOFF, ROLLBACK, POLICY."""
        n_past = self.n_past
        drafted, drafter, policy = draft.tokens, self.drafter, self.policy
        # ACCEPT
        c = self.constraint
        verdict = self.sampler.verify(
            logits,
            drafted,
            draft.q,
            self.tokens,
            masks=None if c is None else c.verify_masks(drafted),
            probs=self.logprobs,
            top=self.top_logprobs,
        )
        n_acc, new = verdict.n_accepted, verdict.token
        if c is not None:
            c.settle(n_acc, new)
        # HANDOFF of the accepted tokens, now in the target KV (the drafter copies the rows:
        # views die with the next decode)
        if drafter is not None:
            drafter.observe([self.tokens[-1], *drafted[:n_acc]], n_past, hidden)
        # ROLLBACK
        t3 = time.perf_counter()
        if n_acc < len(drafted):
            self.rollback.trim(n_past + n_acc + 1)
        t_draft, t_verify = t1 - t0, (t2 - t1) + (time.perf_counter() - t3)

        emitted = [*drafted[:n_acc], new] if n_acc else [new]
        self.tokens.extend(emitted)
        self.n_past = n_past + n_acc + 1
        # POLICY
        if policy is not None:
            policy.update(len(drafted), n_acc, t_draft, t_verify, confidence=draft.confidence)
            self.stats.cooldown_steps = policy.cooldown_steps_taken
            if policy.trace:
                self.stats.record_choice(policy.trace[-1])
        source = ""
        if drafter is not None:
            if drafted:  # drafts come from a drafter
                source = drafter.last_source or type(drafter).__name__
            drafter.accepted(len(drafted), n_acc)
        result = StepResult(
            drafted,
            n_acc,
            emitted,
            t_draft,
            t_verify,
            time.perf_counter() - t0,
            source,
            verdict.probs,
            verdict.top,
        )
        self.stats.record(result)
        self._remember_writes()
        return result

    def recover(self, n_past: int) -> None:
        """After a step failed: put the contexts back where the step found them. The target KV
        holds tokens[:-1] again, and the draft head starts over (it drafts from whatever it is
        fed next; losing its older context costs acceptance only)."""
        try:
            self.rollback.trim(n_past)
        except UnsupportedError:
            # n_rs_seq snapshots cannot undo a whole decode: rebuild the target from the text
            self.target.seq_rm(0)
            self._prefill(self.tokens[:n_past], 0)
        if self.drafter:
            self.drafter.reset()
        if self.constraint is not None:
            self.constraint.discard()
        self._remember_writes()

    def close(self) -> None:
        self.state = State.CLOSED
