"""The sampling transform and draw written out in numpy, as pymtp ran them before the arithmetic
moved to native code (sampler.cpp): the reference the native sampler is tested against
(tests/test_sampling.py) and timed against (tools/measure_sampling.py). Float64, whole rows."""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x))
    return e / e.sum()


def reference_penalized(row, history=(), penalty=1.0, window=64, presence=0.0, frequency=0.0, bias=None):
    """Logit bias, then the penalties over the last `window` tokens, written out."""
    x = np.asarray(row, dtype=np.float64).copy()
    for t, b in (bias or {}).items():
        x[t] += b
    recent = list(history)[-window:] if window else []
    for t in set(recent):
        x[t] = x[t] / penalty if x[t] > 0 else x[t] * penalty
        x[t] -= frequency * recent.count(t) + presence
    return x


def reference_probs(
    row,
    history=(),
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    min_p=0.0,
    penalty=1.0,
    window=64,
    presence=0.0,
    frequency=0.0,
    bias=None,
):
    """The documented transform, written out: bias, penalties, temperature, top-k, top-p, min-p."""
    x = reference_penalized(row, history, penalty, window, presence, frequency, bias)
    x = x / temperature
    n = len(x)
    if 0 < top_k < n:
        x[np.argpartition(x, n - top_k)[: n - top_k]] = -np.inf
    p = softmax(x)
    if top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        before = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])  # mass of the likelier tokens
        p[order[before >= top_p]] = 0.0  # the nucleus already reached top_p
    if min_p > 0.0:
        p[p < min_p * p.max()] = 0.0
    return p / p.sum()


def reference_draw(rng, p) -> int:
    """How pymtp drew in numpy before the arithmetic moved to C: inverse CDF in id order."""
    cum = np.cumsum(p)
    return int(min(np.searchsorted(cum, rng.random() * cum[-1], side="right"), len(p) - 1))


_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix64(z):
    """splitmix64's finalizer, on Python ints or numpy uint64 arrays (wrapping)."""
    if isinstance(z, np.ndarray):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def reference_race(p, seed: int, position: int) -> int:
    """A coupled draw written out: the exponential race argmin_j -log(U_j) / p_j, with U_j the
    hash of (seed, position, token j) that the native sampler uses."""
    key = _mix64(_mix64((seed + _GOLDEN) & _MASK64) ^ ((position * _GOLDEN) & _MASK64))
    ids = np.arange(1, len(p) + 1, dtype=np.uint64)
    h = _mix64(np.uint64(key) + ids * np.uint64(_GOLDEN))
    u = ((h >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        times = np.where(p > 0, -np.log(u) / np.where(p > 0, p, 1.0), np.inf)
    return int(np.argmin(times))
