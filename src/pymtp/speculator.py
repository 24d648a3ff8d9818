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
                                              VERIFY one target decode of [last, d1..dk]
                                              ACCEPT the sampling rule keeps d1..dn, then adds
                                                     the target's own next token
                                              ROLLBACK drop positions past the accepted ones from
                                                     the target KV (recurrent state: n_rs_seq
                                                     snapshots, or checkpoint + re-decode)
                                              HANDOFF queue accepted tokens with their hidden rows
                                                     for the draft head
                                              POLICY  record acceptance, adapt k, cooldown
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
from dataclasses import dataclass, field

import numpy as np

from .config import SamplingConfig, SpecConfig
from .drafter import Draft, DraftPolicy, MTPDrafter
from .errors import UnsupportedError
from .model import DraftContext, TargetContext
from .sampling import Sampler


class State(enum.Enum):
    IDLE = "idle"
    READY = "ready"
    CLOSED = "closed"


@dataclass
class StepResult:
    """What one speculative step did."""

    drafted: list[int]
    n_accepted: int
    emitted: list[int]        # accepted drafts + the target's own token
    t_draft: float            # seconds proposing (draft-head decodes and token choice)
    t_verify: float           # seconds in the target decode and rollback (native)
    t_total: float


@dataclass
class SpecStats:
    """Counters of a generation. accepted_at[i] counts steps whose draft token i was accepted."""

    n_steps: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_emitted: int = 0
    drafted_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    n_prompt: int = 0
    t_prefill: float = 0.0
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_total: float = 0.0            # wall time of the steps (prefill excluded)
    cooldown_steps: int = 0

    def record(self, r: StepResult) -> None:
        self.n_steps += 1
        self.n_drafted += len(r.drafted)
        self.n_accepted += r.n_accepted
        self.n_emitted += len(r.emitted)
        for counts, n in ((self.drafted_at, len(r.drafted)), (self.accepted_at, r.n_accepted)):
            if len(counts) < n:
                counts.extend([0] * (n - len(counts)))
            for i in range(n):
                counts[i] += 1
        self.t_draft += r.t_draft
        self.t_verify += r.t_verify
        self.t_total += r.t_total

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens (0 when nothing was drafted)."""
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        """P(draft token i accepted | it was drafted)."""
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at)]

    @property
    def mean_accepted(self) -> float:
        """Mean accepted draft tokens per step."""
        return self.n_accepted / self.n_steps if self.n_steps else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.n_emitted / self.n_steps if self.n_steps else 0.0

    @property
    def t_python(self) -> float:
        """Step time spent outside the draft head and the target decode."""
        return max(0.0, self.t_total - self.t_draft - self.t_verify)

    @property
    def tokens_per_second(self) -> float:
        return self.n_emitted / self.t_total if self.t_total > 0 else 0.0

    def plot(self, ax=None):
        """Per-position acceptance and the time split (needs matplotlib: pip install 'pymtp[plot]')."""
        from .display import plot_stats
        return plot_stats(self, ax=ax)

    def _repr_html_(self) -> str:  # Jupyter
        from .display import stats_html
        return stats_html(self)


class MTPSpeculator:
    """Speculative decoding with a model's MTP head as the draft model.

    target: the trunk's context. draft: a DraftContext bound to it, or None
    for plain decoding. See the module docstring for the state machine.
    """

    def __init__(self, target: TargetContext, draft: DraftContext | None = None,
                 sampling: SamplingConfig | None = None, spec: SpecConfig | None = None) -> None:
        self.target = target
        self.model = target.model
        self.sampling = sampling or SamplingConfig()
        self.spec = spec or SpecConfig()
        self.drafter = MTPDrafter(draft) if draft is not None else None
        n_max = min(self.spec.n_draft, self.drafter.max_draft) if self.drafter else 0
        self.policy = DraftPolicy(self.spec, n_max) if self.drafter else None
        self.n_max_draft = n_max
        # Hybrid models roll recurrent state back with llama.cpp's n_rs_seq snapshots
        # when the target has enough of them, else with a checkpoint and a re-decode.
        self._checkpoint = (self.drafter is not None and self.model.is_recurrent
                            and target.n_rs_seq < n_max)
        self.sampler = Sampler(self.sampling)
        self.tokens: list[int] = []
        self.n_past = 0
        self.stats = SpecStats()
        self.state = State.IDLE

    # ---- prefill ----------------------------------------------------------------------------

    def start(self, prompt: list[int], sampling: SamplingConfig | None = None) -> None:
        """Begin a generation: reset both KV caches and prefill the prompt."""
        if self.state is State.CLOSED:
            raise UnsupportedError("the speculator is closed")
        if not prompt:
            raise ValueError("the prompt is empty: give at least one token")
        if len(prompt) >= self.target.n_ctx:
            raise ValueError(f"the prompt ({len(prompt)} tokens) does not fit the context "
                             f"(n_ctx={self.target.n_ctx}); leave room for at least one new token")
        if sampling is not None:
            self.sampling = sampling
        self.sampler = Sampler(self.sampling)
        self.policy = DraftPolicy(self.spec, self.n_max_draft) if self.drafter else None
        self.stats = SpecStats(n_prompt=len(prompt))
        self.state = State.IDLE          # until the prefill succeeds
        t0 = time.perf_counter()
        self.target.seq_rm(0)
        if self.drafter:
            self.drafter.reset()
        self.tokens = list(prompt)
        self.n_past = 0
        body = self.tokens[:-1]
        step = self.target.n_batch
        for p0 in range(0, len(body), step):
            chunk = body[p0:p0 + step]
            out = np.zeros(len(chunk), dtype=np.uint8)   # no logits needed: hidden rows come anyway
            out[-1] = 1
            self.target.decode(chunk, p0, output=out)
            if self.drafter:
                self.drafter.observe(chunk, p0, self.target.hidden())
            self.n_past = p0 + len(chunk)
        self.stats.t_prefill = time.perf_counter() - t0
        self.state = State.READY

    # ---- one step ------------------------------------------------------------------------------

    def room(self) -> int:
        """Positions left in the context for new tokens."""
        return self.target.n_ctx - self.n_past

    def step(self, max_new: int | None = None) -> StepResult:
        """Advance one speculative step: draft, verify, accept, roll back, hand off.

        max_new bounds the tokens this step may emit (drafts are sized so as
        not to waste work past it)."""
        if self.state is not State.READY:
            raise UnsupportedError(f"step() needs a started generation (state is {self.state.value})")
        if self.room() < 1:
            raise ValueError("the context is full")
        t0 = time.perf_counter()
        n_past, last = self.n_past, self.tokens[-1]

        # DRAFT
        k = self.policy.next_length() if self.policy else 0
        limit = min(self.room() - 1, self.target.n_batch - 1)
        if max_new is not None:
            limit = min(limit, max_new - 1)
        k = max(0, min(k, limit))
        draft = (self.drafter.propose(last, n_past, k, self.sampler, self.tokens, self.spec.p_min)
                 if k > 0 else Draft())
        t1 = time.perf_counter()

        # VERIFY: one target decode of [last, d1..dk]
        batch = [last] + draft.tokens
        if self._checkpoint and draft.tokens:
            self.target.checkpoint_save()
        self.target.decode(batch, n_past)
        logits = self.target.logits()
        t2 = time.perf_counter()

        # ACCEPT
        n_acc, new = self.sampler.verify(logits, draft.tokens, draft.probs, self.tokens)
        accepted = batch[: n_acc + 1]               # now part of the text, in the target KV

        # HANDOFF (the drafter copies the rows: views die with the next decode)
        if self.drafter:
            self.drafter.observe(accepted, n_past, self.target.hidden())

        # ROLLBACK
        t3 = time.perf_counter()
        if n_acc < len(draft.tokens):
            if self._checkpoint:
                self.target.checkpoint_restore()
                self.target.seq_rm(n_past)
                self.target.decode(accepted, n_past, output=[0] * n_acc + [1])
            else:
                self.target.seq_rm(n_past + n_acc + 1)
        t4 = time.perf_counter()

        emitted = draft.tokens[:n_acc] + [new]
        self.tokens.extend(emitted)
        self.n_past = n_past + n_acc + 1

        # POLICY
        if self.policy:
            self.policy.update(len(draft.tokens), n_acc, t1 - t0, t2 - t1)
            self.stats.cooldown_steps = self.policy.cooldown_steps_taken
        result = StepResult(draft.tokens, n_acc, emitted, t1 - t0, (t2 - t1) + (t4 - t3), time.perf_counter() - t0)
        self.stats.record(result)
        return result

    def close(self) -> None:
        self.state = State.CLOSED
