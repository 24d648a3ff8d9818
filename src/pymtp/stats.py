"""What a generation produced and how it went: plain data, no behaviour beyond arithmetic.

Rendering (HTML tables, plots) lives in pymtp.display, which registers itself with
Jupyter; nothing here imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .policy import Choice


@dataclass
class StepResult:
    """What one speculative step did."""

    drafted: list[int]
    n_accepted: int
    emitted: list[int]  # accepted drafts + the target's own token
    t_draft: float  # seconds proposing (draft-head decodes and token choice)
    t_verify: float  # seconds in the target decode and rollback (native)
    t_total: float
    source: str = ""  # which drafter proposed ("mtp", "lookup"; "" for a plain step)
    probs: list[float] | None = None  # the target's probability of each emitted token (logprobs=True)
    top: list[list[tuple[int, float]]] | None = None  # the likeliest tokens of each (top_logprobs=n)


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
    t_total: float = 0.0  # wall time of the steps (prefill excluded)
    cooldown_steps: int = 0
    n_reused: int = 0  # prompt positions taken from the cache, not decoded again
    reuse_miss: str = ""  # why more of the prompt could not be reused ("" = all it shared)
    reused_saved: bool = False  # the reused cache was a saved text (another conversation's)
    draft_vocab: int = 0  # tokens the MTP head scored (a trimmed draft vocabulary; 0 = all)
    by_source: dict[str, tuple[int, int]] = field(default_factory=dict)  # drafter -> (drafted, accepted) tokens
    # the auto policy (pymtp.policy), step by step: the draft length it chose (probes included),
    # and its predicted and the measured tokens per second of that step
    k_chosen: list[int] = field(default_factory=list)
    tps_predicted: list[float] = field(default_factory=list)
    tps_measured: list[float] = field(default_factory=list)

    def record_choice(self, choice: Choice) -> None:
        """A pymtp.policy.Choice of the step just recorded."""
        self.k_chosen.append(choice.k)
        self.tps_predicted.append(choice.predicted_tps)
        self.tps_measured.append(choice.measured_tps)

    def record(self, r: StepResult) -> None:
        if r.drafted and r.source:
            d, a = self.by_source.get(r.source, (0, 0))
            self.by_source[r.source] = (d + len(r.drafted), a + r.n_accepted)
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
        """P(draft token i accepted | it was drafted), for every position ever drafted (accepted_at
        only grows as far as acceptances reach: the positions past it count 0 accepted)."""
        accepted = self.accepted_at + [0] * (len(self.drafted_at) - len(self.accepted_at))
        return [a / d if d else 0.0 for a, d in zip(accepted, self.drafted_at)]

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


@dataclass
class GenerationResult:
    """The outcome of one generation."""

    text: str
    tokens: list[int]
    prompt_tokens: list[int]
    finish_reason: str  # "stop" (end-of-generation token or stop string), "length", "context"
    stats: SpecStats
    logprobs: list[float] | None = None  # log p of each token under the sampling settings (logprobs=True)
    top_logprobs: list[list[tuple[int, float]]] | None = None  # per token: its row's n likeliest (token, log p)

    def __str__(self) -> str:
        return self.text
