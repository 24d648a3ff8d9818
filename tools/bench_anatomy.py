"""What `pymtp bench` times, taken apart: the bench's own loop (warm-up, then repeats x variants,
the same Session, prompts and run_pymtp), with the parts of each timed generation measured.

    python tools/bench_anatomy.py [--model echo-80-1.5b] [--threads 2] [--drafts 3] [--repeats 2]
        [--max-tokens 32] [--prompts code] [--n-prompts 1] [--json OUT]

Run it under /work/tools/bench-quiet (it prints speeds). The bench's tok/s is tokens over
(generate()'s wall time - stats.t_prefill); this splits that decode region of every run into:

* ``speculator``: session.speculator() (a new MTPSpeculator when the drafter kind changes:
  the old text stashed, the drafter made and configured);
* ``start-extra``: start() outside its own t_prefill (argument checks, configure);
* ``step 1`` and ``steps 2..``: MTPSpeculator.step() calls (the first one separately: it feeds
  the head the prompt's queue and meets the first verify of its row count);
* ``rest``: tokenizing, TextOutput, detokenizing (the region less everything above).

Native calls inside the speculator, start() and step 1 are keyed (``decode trunk x4``,
``decode head x65``, ``draft_set_vocab``, ``state_get``...), as profile_spec_step.py does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymtp.session as session_mod
import pymtp.speculator as spec_mod
from pymtp._native import ffi, lib
from pymtp.bench.base import N_CTX
from pymtp.bench.models import resolve_model
from pymtp.bench.prompts import code_prompts, prose_prompts
from pymtp.bench.runners import make_variants, run_pymtp
from pymtp.bench.sampling import from_temperature
from pymtp.session import Session


class Probe:
    """Per generation: seconds in each part, each step's wall time, native calls by key."""

    def __init__(self) -> None:
        self.reset()
        self.zone = ""  # "speculator", "step1": native calls are keyed only inside these

    def reset(self) -> None:
        self.parts: dict[str, float] = defaultdict(float)
        self.steps: list[float] = []
        self.tokens: list[int] = []
        self.native: dict[str, float] = defaultdict(float)
        self.t_prefill_inner = 0.0


PROBE = Probe()


def _wrap_method(cls: type, name: str, part: str, zone: str = "") -> None:
    f = getattr(cls, name)

    def timed(*a: Any, **k: Any) -> Any:
        old = PROBE.zone
        PROBE.zone = zone or old
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            PROBE.parts[part] += time.perf_counter() - t
            PROBE.zone = old

    setattr(cls, name, timed)


def _wrap_step() -> None:
    f = spec_mod.MTPSpeculator.step

    def step(self: Any, *a: Any, **k: Any) -> Any:
        first = not PROBE.steps
        old = PROBE.zone
        PROBE.zone = "step1" if first else ""
        t = time.perf_counter()
        try:
            r = f(self, *a, **k)
        finally:
            PROBE.zone = old
        PROBE.steps.append(time.perf_counter() - t)
        PROBE.tokens.append(len(r.emitted))
        return r

    spec_mod.MTPSpeculator.step = step  # type: ignore[method-assign]


def _wrap_native(target_handle: Callable[[], Any]) -> None:
    raw = lib._raw
    names = [n for n in dir(raw) if n.startswith("pymtp_") and ffi.typeof(getattr(raw, n)).kind == "function"]
    for n in names:
        f = getattr(lib, n)

        def call(*args: Any, _f: Any = f, _n: str = n) -> Any:
            if not PROBE.zone:
                return _f(*args)
            t = time.perf_counter()
            try:
                return _f(*args)
            finally:
                short = _n.removeprefix("pymtp_")
                if _n == "pymtp_decode_rows":
                    short = f"decode {'trunk' if args[0] == target_handle() else 'head'} x{args[4]}"
                PROBE.native[f"{PROBE.zone}: {short}"] += time.perf_counter() - t

        lib.__dict__[n] = call


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="echo-80-1.5b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--drafts", default="3")
    ap.add_argument("--prompts", choices=("code", "prose", "both"), default="code")
    ap.add_argument("--n-prompts", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    prompts = []
    if args.prompts in ("code", "both"):
        prompts += code_prompts(args.n_prompts)
    if args.prompts in ("prose", "both"):
        prompts += prose_prompts(args.n_prompts)
    variants = make_variants([int(x) for x in args.drafts.split(",")], False)
    st = from_temperature(0.0)

    _wrap_method(session_mod.Session, "speculator", "speculator", zone="speculator")
    _wrap_method(spec_mod.MTPSpeculator, "start", "start", zone="start")
    _wrap_step()
    runs: list[dict[str, Any]] = []
    t_load = time.perf_counter()
    with Session(resolve_model(args.model), n_ctx=N_CTX, n_threads=args.threads) as session:
        print(f"model loaded in {time.perf_counter() - t_load:.2f} s", file=sys.stderr)
        target_handle = lambda: session._target._handle() if session._target is not None else None  # noqa: E731
        _wrap_native(target_handle)

        def one(v: Any, p: Any, seed: int, n_tok: int, rep: int) -> None:
            PROBE.reset()
            rec = run_pymtp(session, v, p.text, st, seed, n_tok)
            decode_region = rec["wall_s"] - rec["t_prefill"]
            steps = PROBE.steps
            parts = {
                "speculator": PROBE.parts["speculator"],
                "start-extra": PROBE.parts["start"] - rec["t_prefill"],
                "step 1": steps[0] if steps else 0.0,
                "steps 2..": sum(steps[1:]),
            }
            parts["rest"] = decode_region - sum(parts.values())
            runs.append(
                {
                    "variant": v.name,
                    "repeat": rep,
                    "prompt": p.id,
                    "n_tokens": rec["n_tokens"],
                    "n_steps": rec["n_steps"],
                    "tps": rec["tps"],
                    "t_prefill": rec["t_prefill"],
                    "decode_region": decode_region,
                    "parts": parts,
                    "step_s": list(steps),
                    "step_tokens": list(PROBE.tokens),
                    "native": dict(PROBE.native),
                }
            )

        for v in variants:  # the bench's warm-up: every variant once, 16 tokens
            one(v, prompts[0], 0, min(16, args.max_tokens), -1)
        for rep in range(args.repeats):
            for p in prompts:
                for v in variants:
                    one(v, p, 1000 + rep, args.max_tokens, rep)

    _print(runs, variants)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


def _print(runs: list[dict[str, Any]], variants: list[Any]) -> None:
    ms = lambda s: f"{1e3 * s:7.2f}"  # noqa: E731
    print("per timed run (ms): decode region = speculator + start-extra + step 1 + steps 2.. + rest")
    for r in runs:
        p = r["parts"]
        later = r["step_s"][1:]
        print(
            f"{r['variant']:13s} rep {r['repeat']:2d}  {r['tps']:6.1f} tok/s  region {ms(r['decode_region'])}  "
            + "  ".join(f"{k} {ms(v)}" for k, v in p.items())
            + f"  | {r['n_steps']} steps, later steps median {ms(statistics.median(later)) if later else '-'}"
        )
    timed = [r for r in runs if r["repeat"] >= 0]
    print("\nnative calls inside speculator(), start() and step 1 (ms per timed run, means):")
    for v in variants:
        rs = [r for r in timed if r["variant"] == v.name]
        if not rs:
            continue
        keys = sorted({k for r in rs for k in r["native"]}, key=lambda k: -sum(r["native"].get(k, 0) for r in rs))
        mean_ms = {k: 1e3 * sum(r["native"].get(k, 0) for r in rs) / len(rs) for k in keys[:8]}
        print(f"  {v.name}: " + ", ".join(f"{k} {x:.2f}" for k, x in mean_ms.items()))
    print("\nmedians over the timed runs (ms per generation; per step: steps 2.. only):")
    for v in variants:
        rs = [r for r in timed if r["variant"] == v.name]
        if not rs:
            continue
        med = {k: statistics.median(r["parts"][k] for r in rs) for k in rs[0]["parts"]}
        later = [s for r in rs for s in r["step_s"][1:]]
        toks = [t for r in rs for t in r["step_tokens"][1:]]
        per_step = f"{ms(statistics.mean(later)) if later else '-'} ({sum(toks) / max(len(later), 1):.2f} tok/step)"
        print(
            f"  {v.name:13s} tok/s {statistics.median(r['tps'] for r in rs):6.1f}  "
            + "  ".join(f"{k} {ms(x)}" for k, x in med.items())
            + f"  step 2.. {per_step}"
        )

    _print_ratios(timed, variants)


def _print_ratios(timed: list[dict[str, Any]], variants: list[Any]) -> None:
    """Each speculative variant over plain, repeat by repeat, as the bench reads it and with
    the parts outside the steps taken away, down to the steady steps' own ratio."""
    print("\nover plain, per repeat: bench | less speculator() | steps only | middle steps (median step, tokens/step)")
    for v in variants:
        if not v.speculative:
            continue
        for rep in sorted({r["repeat"] for r in timed}):
            p = next((r for r in timed if r["variant"] == "plain" and r["repeat"] == rep), None)
            m = next((r for r in timed if r["variant"] == v.name and r["repeat"] == rep), None)
            if p is None or m is None or len(m["step_s"]) < 3:
                continue

            def tps(r: dict[str, Any], less: float) -> float:
                return r["n_tokens"] / (r["decode_region"] - less)

            bench = m["tps"] / p["tps"]
            no_spec = tps(m, m["parts"]["speculator"]) / tps(p, p["parts"]["speculator"])
            steps = (m["n_tokens"] / sum(m["step_s"])) / (p["n_tokens"] / sum(p["step_s"]))
            sp, sm = statistics.median(p["step_s"][1:]), statistics.median(m["step_s"][1:-1])
            tok = sum(m["step_tokens"][1:-1]) / len(m["step_tokens"][1:-1])
            print(
                f"  {v.name:13s} rep {rep:2d}: {bench:.3f} | {no_spec:.3f} | {steps:.3f} | {tok / sm * sp:.3f} "
                f"(plain {1e3 * sp:.1f} ms, {v.name} {1e3 * sm:.1f} ms = {sm / sp:.3f} plain steps, {tok:.2f} tokens)"
            )


if __name__ == "__main__":
    sys.exit(main())
