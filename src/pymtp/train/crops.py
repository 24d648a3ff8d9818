"""Training batches: random crops of the teacher's documents, on the host or on the device.

``Crops`` draws which positions a batch holds (numpy, seeded) and gathers them from the
teacher's rows in host memory; ``DeviceCrops`` draws the same way and gathers from rows kept on
the training device (a GPU run's teacher, online.py), so that a batch costs one gather there
instead of megabytes copied from the host each step.
"""

from __future__ import annotations

import numpy as np

from . import teacher


class Crops:
    """Random crops of `seq` positions from the extracted documents, as torch tensors
    (tokens, hidden, top-k ids, top-k log-probs, mask[, seg]).

    ``batch``: one crop per row, padded (short documents leave the rest of the row unused).
    ``packed``: rows filled with crops of several documents one after another, with each
    position's document index (``seg``, -1 past the end) so that attention and targets
    stay inside a document (multistep.chain_loss's ``seg``)."""

    MIN_PIECE = 16  # a row's last few positions stay padding rather than hold a tiny crop

    def __init__(self, docs: teacher.Documents, seq: int, domain_weights: dict[str, float] | None = None):
        self.d, self.seq = docs, seq
        lens = np.diff(docs.offsets)
        self.ok = np.flatnonzero(lens >= 8)
        # each document is drawn with probability proportional to its domain's weight (1 unless
        # named): a domain that a run would otherwise lose (human code) can be seen more often
        self.p: np.ndarray | None = None
        if domain_weights:
            unknown = set(domain_weights) - {str(x) for x in docs.domain}
            if unknown:
                raise ValueError(f"domain weights for domains not in the data: {sorted(unknown)}")
            w = np.asarray([domain_weights.get(str(docs.domain[i]), 1.0) for i in self.ok], np.float64)
            if (w < 0).any() or w.sum() <= 0:
                raise ValueError("domain weights must be >= 0 and leave some document drawable")
            self.p = w / w.sum()

    def _pick(self, rng: np.random.Generator, n: int | None = None):
        return rng.choice(self.ok, size=n, p=self.p)

    def _put(self, src: np.ndarray, b: int, at: int, doc: int, room: int, rng) -> int:
        """A random crop of document doc, at most room positions, into row b from position at
        (src holds each batch position's row in the teacher's arrays, -1 for padding)."""
        d = self.d
        s, e = int(d.offsets[doc]), int(d.offsets[doc + 1])
        take = min(room, e - s)
        o = s + int(rng.integers(0, e - s - take + 1))
        src[b, at : at + take] = np.arange(o, o + take)
        return take

    def batch(self, rng: np.random.Generator, n: int, device):
        src = np.full((n, self.seq), -1, np.int64)
        for b, i in enumerate(self._pick(rng, n)):
            self._put(src, b, 0, int(i), self.seq, rng)
        return self._gather(src, device)

    def packed(self, rng: np.random.Generator, n: int, device):
        src = np.full((n, self.seq), -1, np.int64)
        seg = np.full((n, self.seq), -1, np.int64)
        for b in range(n):
            at, k = 0, 0
            while self.seq - at >= self.MIN_PIECE:
                take = self._put(src, b, at, int(self._pick(rng)), self.seq - at, rng)
                seg[b, at : at + take] = k
                at, k = at + take, k + 1
        return self._gather(src, device) + (_tensor(seg, device),)

    def _gather(self, src: np.ndarray, device) -> tuple:
        d, mask = self.d, src >= 0
        at = np.where(mask, src, 0)
        toks = np.where(mask, d.tokens[at], 0).astype(np.int64)
        hid = np.where(mask[..., None], d.hidden[at], 0).astype(np.float32)
        ids = np.where(mask[..., None], d.topk_ids[at], 0).astype(np.int64)
        logp = np.where(mask[..., None], d.topk_logp[at], -np.inf).astype(np.float32)
        return tuple(_tensor(a, device) for a in (toks, hid, ids, logp, mask))

    def padding(self, rng: np.random.Generator, n: int, packed: bool) -> float:
        """The share of positions a batch leaves unused (mask False), over n batches of 8 rows."""
        make = self.packed if packed else self.batch
        return float(np.mean([1 - make(rng, 8, "cpu")[4].float().mean().item() for _ in range(n)]))


class DeviceCrops(Crops):
    """Crops whose rows live on the training device: docs' tokens, hidden, topk_ids and
    topk_logp are torch tensors there (offsets and domains stay numpy); the same draws as Crops."""

    def _gather(self, src: np.ndarray, device) -> tuple:
        import torch

        d = self.d
        src_t = torch.as_tensor(src, device=d.hidden.device)
        mask = src_t >= 0
        at = src_t.clamp(min=0)
        toks = torch.where(mask, d.tokens[at], 0).long()
        hid = torch.where(mask[..., None], d.hidden[at].float(), 0.0)
        ids = torch.where(mask[..., None], d.topk_ids[at].long(), 0)
        logp = torch.where(mask[..., None], d.topk_logp[at].float(), float("-inf"))
        return tuple(t.to(device) for t in (toks, hid, ids, logp, mask))


def parse_weights(items: list[str] | None) -> dict[str, float]:
    """["code=2", "docs=0.5"] -> {"code": 2.0, "docs": 0.5}."""
    out = {}
    for it in items or []:
        name, sep, val = it.partition("=")
        try:
            out[name.strip()] = float(val)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ValueError(f"a domain weight is DOMAIN=NUMBER, not {it!r}")
    return out


def _tensor(a: np.ndarray, device):
    import torch

    return torch.from_numpy(a).to(device)
