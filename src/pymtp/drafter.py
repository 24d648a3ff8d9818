"""What a drafter is: the Drafter protocol and the data that passes through it.

A text's drafter proposes the tokens its speculative step verifies: the model's MTP head
(pymtp.mtp_drafter.MTPDrafter), prompt lookup (pymtp.lookup), the two mixed (pymtp.hybrid), or
a class of your own. Each step the engine (pymtp.engine) hands every text's drafter a
DraftRequest; ``plan`` answers with a Draft, or with a HeadJob that the engine drafts together
with the other texts' (pymtp.mtp_drafter.draft_with_heads: one draft decode per position).

The policies that size each draft live in pymtp.policy (DraftPolicy is imported here for
older code).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .config import SpecConfig
from .constraint_state import ConstraintState
from .policy import DraftPolicy  # noqa: F401  (moved to pymtp.policy)
from .sampling import Sampler

if TYPE_CHECKING:
    from .mtp_drafter import MTPDrafter


@dataclass
class Draft:
    """Tokens a drafter proposes, the head's top probability for each, and where each token's q
    is (the distribution it was drawn from, which sampling mode's verify reads): Q_IN_SLOTS,
    the text's sampler holds them (drafted through ``Sampler.row``, the MTP head's way);
    Q_POINT_MASS, a point mass on each token (prompt lookup); or a list of vocabulary-sized
    arrays. Greedy drafts need none (None)."""

    tokens: list[int] = field(default_factory=list)
    confidence: list[float] = field(default_factory=list)
    q: str | list[np.ndarray] | None = None


@dataclass
class DraftRequest:
    """What one text asks its drafter for in one step: up to k tokens to follow last_token (at
    position n_past; history ends with it), chosen under sampler, none below p_min."""

    last_token: int
    n_past: int
    k: int
    sampler: Sampler
    history: list[int]
    p_min: float = 0.0
    constraint: ConstraintState | None = None  # masks each draft position, advanced by each token

    @property
    def plain_greedy(self) -> bool:
        """Greedy by the bare argmax (nothing changes it: no penalty, bias, processor or constraint)."""
        return self.sampler.plain_greedy and self.constraint is None


@dataclass
class HeadJob:
    """A single-head MTP draft the engine makes together with the other texts' (one draft
    decode per draft position: draft_with_heads); ``owner`` planned it and hears how it went."""

    drafter: MTPDrafter
    request: DraftRequest
    owner: Drafter


class Drafter:
    """What MTPSpeculator asks of a drafter. Write one by overriding propose(); the rest has
    defaults for drafters that keep no state of their own.

    * ``propose(last_token, n_past, k, sampler, history, p_min)``: up to k tokens to follow
      last_token (at position n_past; history ends with it), as a Draft; in sampling mode
      with each token's q distribution (see Draft; a point mass is fine: exact too);
    * ``plan(request)``: this step's Draft, or a HeadJob that the engine drafts together with
      other texts' (the default: propose());
    * ``observe(tokens, pos0, hidden)``: the target accepted these tokens at pos0.. (hidden:
      its hidden rows when ``wants_hidden``, else None);
    * ``accepted(n_drafted, n_accepted)``: how the last draft fared;
    * ``reset()`` / ``truncate(n_keep)``: forget everything / keep the first n_keep positions
      (returns how many it kept); ``write_count()``: changes to its own cache, if it has one;
      ``configure(spec)``: the SpecConfig of the generations that follow;
    * ``save()`` / ``load(saved)``: its state at the end of the text, to resume that text
      later (a cached conversation); drafters that keep none return None;
    * ``keep_row_at(pos)``: the prompt ends at pos (an MTP head keeps the row it pairs with,
      for a later prompt that keeps exactly these positions).
    """

    max_draft = 16
    wants_hidden = False
    #: After truncate(), whether the next observe() starts at the position before the cut (whose
    #: hidden row pairs with the token at the cut); an MTP head that skips that token says False.
    row_before_cut = True
    last_source = ""  # who proposed the last draft, for the statistics per source
    vocab_size = 0  # tokens a trimmed MTP head scores (0: all, or not an MTP head)
    verify_cost: Callable[[int], float | None] | None = None  # set by the speculator: k -> measured
    #   seconds of a k-token verify (or None)

    def propose(
        self, last_token: int, n_past: int, k: int, sampler: Sampler, history: list[int], p_min: float = 0.0
    ) -> Draft:
        raise NotImplementedError

    def plan(self, request: DraftRequest) -> Draft | HeadJob:
        r = request
        return self.propose(r.last_token, r.n_past, r.k, r.sampler, r.history, r.p_min)

    def drafted(self, draft: Draft, seconds: float) -> None:
        """A HeadJob this drafter planned came back as draft (drafting took seconds)."""

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

    def keep_row_at(self, pos: int) -> None:
        pass
