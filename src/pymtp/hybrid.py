"""The hybrid drafter: prompt lookup where the text repeats itself, the MTP head elsewhere.

Agents rewrite files with small edits, quote passages and repeat JSON: there prompt lookup
proposes long drafts at no model cost. Elsewhere only the MTP head proposes well. Each step
uses one of them, so every draft's q is one drafter's (a point mass or the head's), and the
acceptance rule stays exact either way.

The choice, per step: lookup when its continuation has at least ``min_match`` tokens and its
recent per-token acceptance is at least the head's (both decayed counts, so a source that
stops paying loses the step); the head otherwise. Lookup drafts up to the step's length;
the head at most ``mtp_draft`` tokens (its acceptance falls fast with depth). The head keeps
being fed the accepted text while lookup drafts (its queue is flushed when full), so it is
ready whenever it is chosen again. ``last_source`` names the drafter of the last draft, for
the statistics per source.
"""

from __future__ import annotations

from .config import SpecConfig
from .drafter import Draft, Drafter, MTPDrafter
from .lookup import PromptLookupDrafter
from .sampling import Sampler


class HybridDrafter(Drafter):
    wants_hidden = True

    def __init__(self, mtp: MTPDrafter, lookup: PromptLookupDrafter, mtp_draft: int = 2, min_match: int = 2,
                 window: int = 16) -> None:
        self.mtp, self.lookup = mtp, lookup
        self.mtp_draft, self.min_match = mtp_draft, min_match
        self.max_draft = max(lookup.max_draft, min(mtp.max_draft, mtp_draft))
        self._decay = 1.0 - 1.0 / window
        # decayed (accepted, checked) draft tokens per source; a prior of one in two
        self._rate = {"lookup": [1.0, 2.0], "mtp": [1.0, 2.0]}
        self.last_source = ""

    def configure(self, spec: SpecConfig) -> None:
        self.mtp.configure(spec)
        self.lookup.configure(spec)

    def rate(self, source: str) -> float:
        a, n = self._rate[source]
        return a / n

    def propose(self, last_token: int, n_past: int, k: int, sampler: Sampler, history: list[int],
                p_min: float = 0.0) -> Draft:
        cont = self.lookup.continuation(history, k)
        if len(cont) >= self.min_match and self.rate("lookup") >= self.rate("mtp"):
            self.last_source = "lookup"
            return self.lookup.propose(last_token, n_past, k, sampler, history, p_min)
        self.last_source = "mtp"
        return self.mtp.propose(last_token, n_past, min(k, self.mtp_draft), sampler, history, p_min)

    def accepted(self, n_drafted: int, n_accepted: int) -> None:
        """The last draft's outcome (the speculator reports it): updates its source's rate."""
        if n_drafted == 0 or not self.last_source:
            return
        for r in self._rate.values():
            r[0] *= self._decay
            r[1] *= self._decay
        r = self._rate[self.last_source]
        r[0] += n_accepted
        r[1] += min(n_drafted, n_accepted + 1)      # tokens after the first rejection go unchecked

    # ---- the head's state follows the text whoever drafts --------------------------------------

    def observe(self, tokens, pos0, hidden) -> None:
        self.mtp.observe(tokens, pos0, hidden)

    def reset(self) -> None:
        self.mtp.reset()

    def truncate(self, n_keep: int) -> int:
        return self.mtp.truncate(n_keep)

    def write_count(self) -> int:
        return self.mtp.write_count()

    def save(self) -> object:
        return self.mtp.save()

    def load(self, saved: object) -> None:
        self.mtp.load(saved)

    @property
    def vocab_size(self) -> int:
        return self.mtp.vocab_size
