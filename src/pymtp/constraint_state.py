"""A text's constraint during speculation: the accepted text, plus draft tokens held tentatively.

The engine owns it (one per text, made by MTPSpeculator.start): drafting asks it for the mask of
each draft position and advances it by each drafted token (``draft_mask``, ``drafted``); the
verify gets the masks of all k + 1 rows (``verify_masks``); after the verify ``settle`` rolls it
back to the accepted prefix and adds the emitted token; a step that fails ``discard``s what it
held tentatively. The sampler only applies masks (pymtp.sampling)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .sampling import TokenConstraint, mask_allows, mask_refuse


class ConstraintState:
    """constraint: the TokenConstraint of one text (at the start of its generated text); n_rows:
    the most rows one step masks (the longest draft + 1)."""

    def __init__(self, constraint: TokenConstraint, n_vocab: int, n_rows: int) -> None:
        self.constraint = constraint
        self.n_tentative = 0  # draft tokens it holds beyond the accepted text
        self._masks = np.zeros((max(1, n_rows), (n_vocab + 31) // 32), dtype=np.uint32)

    def draft_mask(self, i: int) -> np.ndarray:
        """The allowed tokens at draft position i (after the i draft tokens it holds)."""
        if i != self.n_tentative:
            raise ValueError(f"draft position {i} under a constraint that holds {self.n_tentative} draft tokens")
        if i >= len(self._masks) - 1:
            raise ValueError(f"draft position {i}: this state masks drafts of at most {len(self._masks) - 1} tokens")
        self.constraint.fill_mask(self._masks[i])
        return self._masks[i]

    def drafted(self, token: int) -> None:
        """A token was drafted at the position draft_mask gave last: hold it tentatively."""
        if self.constraint.accept(token):
            self.n_tentative += 1

    def verify_masks(self, draft: Sequence[int]) -> np.ndarray:
        """Masks for verify rows 0..k: the state before each draft token and after the last.
        Rows masked while drafting are kept; the rest of the draft is walked (a token the
        constraint refuses ends the walk: its row rejects it, later rows go unread)."""
        c, k = self.constraint, len(draft)
        if k + 1 > len(self._masks):
            raise ValueError(f"a draft of {k} tokens: this state masks drafts of at most {len(self._masks) - 1}")
        if self.n_tentative > k:  # a drafter drew tokens it then dropped
            c.rollback(self.n_tentative - k)
            self.n_tentative = k
        i = self.n_tentative
        while i <= k:
            c.fill_mask(self._masks[i])
            if i == k or not mask_allows(self._masks[i], draft[i]):
                break
            if not c.accept(draft[i]):
                # the mask allowed it but the constraint refuses it (a second end token after an
                # accepted one): the row must refuse it too, or the verify accepts a token the
                # constraint never held and reads the stale masks of the rows after it
                mask_refuse(self._masks[i], int(draft[i]))
                break
            i += 1
            self.n_tentative = i
        return self._masks[: k + 1]

    def settle(self, n_accepted: int, token: int) -> None:
        """After a verify: back to the accepted prefix, then the emitted token (allowed: it was
        chosen under the mask)."""
        self.constraint.rollback(self.n_tentative - n_accepted)
        self.n_tentative = 0
        self.constraint.accept(token)

    def discard(self) -> None:
        """Back to the accepted text (a step that failed half-way)."""
        if self.n_tentative:
            self.constraint.rollback(self.n_tentative)
        self.n_tentative = 0

    def is_terminated(self) -> bool:
        return self.constraint.is_terminated()
