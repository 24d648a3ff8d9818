"""The hybrid drafter: prompt lookup where the text repeats itself, the MTP head elsewhere.

Agents rewrite files with small edits, quote passages and repeat JSON: there prompt lookup
proposes long drafts at no model cost. Elsewhere only the MTP head proposes well. Each step
uses one of them, so every draft's q is one drafter's (a point mass or the head's), and the
acceptance rule stays exact either way.

The choice, per step, is a cost model: for each source, the expected tokens per second of
its draft, (1 + sum_{i<k} prod_{j<=i} a_j) / (k * c_draft + c_verify(k)), with a_j that
source's recent acceptance at draft position j (decayed counts; an untried position borrows
the rate of the one before), c_draft
its measured drafting seconds per token, and c_verify the speculator's verify cost (its
policy's: pymtp.policy). Lookup is a candidate when its continuation has at least ``min_match``
tokens and drafts all of it; the head drafts at most ``mtp_draft`` tokens. Before any verify has been
timed, lookup wins when its per-token acceptance is at least the head's. The head keeps being
fed the accepted text while lookup drafts (its queue is flushed when full), so it is ready
whenever it is chosen again. ``last_source`` names the drafter of the last draft, for the
statistics per source.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from .config import SpecConfig
from .drafter import Draft, Drafter, DraftRequest, HeadJob
from .lookup import PromptLookupDrafter
from .mtp_drafter import MTPDrafter, draft_all
from .sampling import Sampler


class HybridDrafter(Drafter):
    wants_hidden = True

    def __init__(
        self, mtp: MTPDrafter, lookup: PromptLookupDrafter, mtp_draft: int = 2, min_match: int = 2, window: int = 16
    ) -> None:
        self.mtp, self.lookup = mtp, lookup
        self.mtp_draft, self.min_match = mtp_draft, min_match
        self.max_draft = max(lookup.max_draft, min(mtp.max_draft, mtp_draft))
        self._decay = 1.0 - 1.0 / window
        # per source: decayed (accepted, reached) counts per draft position, seconds per drafted token
        n = self.max_draft
        self._acc = {s: np.zeros(n) for s in ("lookup", "mtp")}
        self._seen = {s: np.zeros(n) for s in ("lookup", "mtp")}
        self._c_draft = {"lookup": 0.0, "mtp": 0.0}
        self.last_source = ""
        self.last_scores: dict[str, float | None] = {}  # expected tokens/s of each candidate, last step

    def configure(self, spec: SpecConfig) -> None:
        self.mtp.configure(spec)
        self.lookup.configure(spec)

    def rates(self, source: str, k: int) -> np.ndarray:
        """Acceptance at draft positions 0..k-1: each position's counts with one pseudo-count at
        the rate of the position before (one in two before position 0), as DraftPolicy does, so
        that a deep position seldom reached is not credited a flat prior."""
        out, prev = np.empty(k), 0.5
        acc, seen = self._acc[source], self._seen[source]
        for i in range(k):
            prev = out[i] = (acc[i] + prev) / (seen[i] + 1.0)
        return out

    def rate(self, source: str) -> float:
        """Per-token acceptance of a source's checked draft tokens."""
        return float((self._acc[source].sum() + 1.0) / (self._seen[source].sum() + 2.0))

    def score(self, source: str, k: int) -> float | None:
        """Expected tokens per second of a k-token draft from source (None: no verify timed yet)."""
        vc = self.verify_cost(k) if self.verify_cost is not None else None
        if vc is None:
            return None
        gain = 1.0 + float(np.cumprod(self.rates(source, k)).sum())
        return gain / max(k * self._c_draft[source] + float(vc), 1e-9)

    def propose(
        self, last_token: int, n_past: int, k: int, sampler: Sampler, history: list[int], p_min: float = 0.0
    ) -> Draft:
        return draft_all([self], [DraftRequest(last_token, n_past, k, sampler, history, p_min)])[0]

    def plan(self, r: DraftRequest) -> Draft | HeadJob:
        """Lookup's draft, or the head's (a HeadJob the engine drafts with the other texts')."""
        t0 = time.perf_counter()
        cont = self.lookup.continuation(r.history, r.k)
        k_mtp = min(r.k, self.mtp_draft)
        use_lookup = False
        if len(cont) >= self.min_match:
            s_lookup, s_mtp = self.score("lookup", len(cont)), self.score("mtp", k_mtp)
            self.last_scores = {"lookup": s_lookup, "mtp": s_mtp}
            use_lookup = (
                s_lookup >= s_mtp
                if s_lookup is not None and s_mtp is not None
                else self.rate("lookup") >= self.rate("mtp")
            )
        self.last_source = "lookup" if use_lookup else "mtp"
        source = self.lookup if use_lookup else self.mtp
        plan = source.plan(replace(r, k=len(cont) if use_lookup else k_mtp))
        if isinstance(plan, HeadJob):
            return HeadJob(plan.drafter, plan.request, self)
        self.drafted(plan, time.perf_counter() - t0)
        return plan

    def drafted(self, draft: Draft, seconds: float) -> None:
        """Times the last source's drafting per token."""
        if draft.tokens:
            dt = seconds / len(draft.tokens)
            c = self._c_draft[self.last_source]
            self._c_draft[self.last_source] = dt if c == 0.0 else 0.8 * c + 0.2 * dt

    def accepted(self, n_drafted: int, n_accepted: int) -> None:
        """The last draft's outcome (the speculator reports it): updates its source's rates."""
        if n_drafted == 0 or not self.last_source:
            return
        for src in self._acc:
            self._acc[src] *= self._decay
            self._seen[src] *= self._decay
        reached = min(n_drafted, n_accepted + 1)  # tokens after the first rejection go unchecked
        self._seen[self.last_source][:reached] += 1.0
        self._acc[self.last_source][:n_accepted] += 1.0

    # ---- the head's state follows the text whoever drafts --------------------------------------

    def observe(self, tokens, pos0, hidden) -> None:
        self.mtp.observe(tokens, pos0, hidden)

    def reset(self) -> None:
        self.mtp.reset()

    def truncate(self, n_keep: int) -> int:
        return self.mtp.truncate(n_keep)

    def keep_row_at(self, pos: int) -> None:
        self.mtp.keep_row_at(pos)

    @property
    def row_before_cut(self) -> bool:  # type: ignore[override]  # the head's answer, after its truncate
        return self.mtp.row_before_cut

    def write_count(self) -> int:
        return self.mtp.write_count()

    def save(self) -> object:
        return self.mtp.save()

    def load(self, saved: object) -> None:
        self.mtp.load(saved)  # type: ignore[arg-type]  # what self.mtp.save() gave

    @property
    def vocab_size(self) -> int:  # type: ignore[override]  # the MTP drafter's, read-only
        return self.mtp.vocab_size
