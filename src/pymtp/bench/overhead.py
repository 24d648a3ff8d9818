"""Python overhead of a step: time inside libpymtp's calls against the step's wall time,
counted through ``pymtp._native.instrument``: the adaptive policy's profile (with a cProfile
top list), and per variant the sampling time (the native sampler's calls) and the Python
time per step (``step_costs``)."""

from __future__ import annotations

import cProfile
import math
import pstats
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._native import instrument, lib
from ..config import SamplingConfig, SpecConfig
from ..session import Session
from ..speculator import MTPSpeculator


class NativeTally:
    """Seconds and calls per libpymtp function; an ``on_call`` for ``instrument``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def __call__(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds
        self.calls[name] += 1


def _wrapper_cost(n: int = 20000) -> float:
    """Extra seconds per call that the instrumentation itself adds (counted as Python time)."""
    pc = time.perf_counter
    best = math.inf
    for _ in range(3):
        t0 = pc()
        for _ in range(n):
            lib.pymtp_last_error()
        plain = pc() - t0
        with instrument(NativeTally()):
            t0 = pc()
            for _ in range(n):
                lib.pymtp_last_error()
            timed = pc() - t0
        best = min(best, (timed - plain) / n)
    return max(best, 0.0)


def _run_steps(s: MTPSpeculator, max_tokens: int) -> float:
    """Step s until max_tokens are out (or the context is full); the wall time."""
    t0 = time.perf_counter()
    n = 0
    while n < max_tokens and s.room() > 1:
        n += len(s.step(max_new=max_tokens - n).emitted)
    return time.perf_counter() - t0


#: The native sampler's calls: the transform, draw and verification of rows (sampler.cpp) and
#: the drafter's greedy argmax.
SAMPLER_CALLS = (
    "pymtp_sampler_row",
    "pymtp_sampler_verify",
    "pymtp_rows_argmax",
    "pymtp_sampler_set_dense",
    "pymtp_sampler_set_point",
    "pymtp_sampler_slot",
)


def step_costs(
    session: Session,
    spec: SpecConfig | None,
    prompts: Sequence[str],
    sampling: SamplingConfig,
    *,
    max_tokens: int,
    wrapper_cost: float | None = None,
) -> dict[str, Any]:
    """One generation per prompt, stepped (prefill excluded) with every native call timed:
    per step, the wall time, the time in the native sampler's calls (SAMPLER_CALLS), in all
    native calls, and the rest (Python and numpy, less the instrumentation's own cost).
    spec None: plain decoding."""
    cost = _wrapper_cost() if wrapper_cost is None else wrapper_cost
    tally = NativeTally()
    wall = 0.0
    n_steps = n_tokens = 0
    with session.lock:
        for prompt in prompts:
            s = session.speculator(sampling, spec)
            s.start(session.model.tokenize(prompt))
            with instrument(tally):
                wall += _run_steps(s, max_tokens)
            n_steps += s.stats.n_steps
            n_tokens += s.stats.n_emitted
    native = sum(tally.seconds.values())
    n_calls = sum(tally.calls.values())
    samp = sum(tally.seconds.get(k, 0.0) for k in SAMPLER_CALLS)
    py = max(wall - native - n_calls * cost, 0.0)
    per = 1e3 / n_steps if n_steps else 0.0
    frac = lambda x: x / wall if wall > 0 else 0.0  # noqa: E731
    return {
        "n_prompts": len(prompts),
        "n_steps": n_steps,
        "n_tokens": n_tokens,
        "wall_s": wall,
        "step_ms": wall * per,
        "sampling_ms_per_step": samp * per,
        "python_ms_per_step": py * per,
        "native_ms_per_step": native * per,
        "sampling_fraction": frac(samp),
        "python_fraction": frac(py),
        "sampling_python_fraction": frac(samp + py),
        "wrapper_cost_us": cost * 1e6,
        "sampler_calls_per_step": sum(tally.calls.get(k, 0) for k in SAMPLER_CALLS) / n_steps if n_steps else 0.0,
        "native_by_call": {
            k: {"s": tally.seconds[k], "calls": tally.calls[k]}
            for k in sorted(tally.seconds, key=lambda k: tally.seconds[k], reverse=True)
        },
    }


def profile_python_overhead(
    session: Session,
    prompt: str,
    *,
    max_tokens: int,
    temp: float = 0.0,
    seed: int = 0,
    adaptive: bool = True,
    n_draft: int = 3,
    cprofile: bool = True,
    sampling: SamplingConfig | None = None,
) -> dict[str, Any]:
    """Run one speculative generation step by step (the session's speculator directly) and
    split its step time into native calls (libpymtp: decodes, logits/hidden views, seq_rm)
    and the rest (Python and numpy: drafting logic, sampling/verification, hand-off copies).
    sampling (optional) replaces temp and seed."""
    spec = SpecConfig() if adaptive else SpecConfig(n_draft=n_draft, adaptive=False)
    toks = session.model.tokenize(prompt)
    sampling = sampling or SamplingConfig(temperature=temp, seed=seed)
    temp = sampling.temperature

    def started() -> MTPSpeculator:
        s = session.speculator(sampling, spec)
        s.start(toks)
        return s

    with session.lock:
        _run_steps(started(), max_tokens)  # warm-up
        s = started()
        tally = NativeTally()
        with instrument(tally):
            wall = _run_steps(s, max_tokens)
        native = sum(tally.seconds.values())
        n_calls = sum(tally.calls.values())
        cost = _wrapper_cost()
        st = s.stats
        py_raw = wall - native
        py = max(py_raw - n_calls * cost, 0.0)
        out: dict[str, Any] = {
            "model": session.model.path.name,
            "temperature": temp,
            "spec": spec.model_dump(),
            "n_tokens": st.n_emitted,
            "n_steps": st.n_steps,
            "step_wall_s": wall,
            "native_s": native,
            "native_calls": n_calls,
            "wrapper_cost_us": cost * 1e6,
            "python_s": py,
            "python_fraction": py / wall if wall > 0 else 0.0,
            "python_fraction_raw": py_raw / wall if wall > 0 else 0.0,
            "python_us_per_step": py / st.n_steps * 1e6 if st.n_steps else 0.0,
            "step_us": wall / st.n_steps * 1e6 if st.n_steps else 0.0,
            "specstats_python_fraction": st.t_python / st.t_total if st.t_total > 0 else 0.0,
            "specstats_split": {"draft": st.t_draft, "verify": st.t_verify, "python": st.t_python, "total": st.t_total},
            "native_by_call": {
                k: {
                    "s": tally.seconds[k],
                    "calls": tally.calls[k],
                    "us_per_call": tally.seconds[k] / tally.calls[k] * 1e6,
                }
                for k in sorted(tally.seconds, key=lambda k: tally.seconds[k], reverse=True)
            },
            "tokens_per_step": st.tokens_per_step,
        }
        if cprofile:
            out["cprofile_top"] = _cprofile_top(started(), max_tokens)
    return out


def _cprofile_top(s: MTPSpeculator, max_tokens: int, top: int = 15) -> list[dict]:
    """The functions with the most own time while s steps (its prefill excluded)."""
    prof = cProfile.Profile()
    prof.enable()
    _run_steps(s, max_tokens)
    prof.disable()
    st = pstats.Stats(prof)
    rows = []
    for (fname, line, func), (_cc, nc, tt, ct, _) in st.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{Path(fname).name}:{line}({func})" if line else func,
                "calls": nc,
                "tottime_s": tt,
                "cumtime_s": ct,
            }
        )
    rows.sort(key=lambda r: r["tottime_s"], reverse=True)
    return rows[:top]
