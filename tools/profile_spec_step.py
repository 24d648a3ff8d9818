"""Where a speculative step's time goes, in situ: plain against mtp-N steps of the same model,
prompts and thread count, every libpymtp call timed and keyed by what it did.

    python tools/profile_spec_step.py [--model default] [--threads 1] [--drafts 1]
        [--prompts both] [--n-prompts 2] [--max-tokens 64] [--rounds 2] [--draft-vocab N] [--json OUT]

Run it under /work/tools/bench-quiet (it prints speeds). The variants alternate prompt by
prompt and round by round (interleaved: both see the same machine load); the prefill is not
counted. A decode is keyed by its context (trunk or head) and its row count, so "trunk x2"
against "trunk x1" is the verify's price over a plain step measured inside the loop. "python"
is the step's wall time less every native call (and less the timer's own cost per call).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pymtp import SamplingConfig, SpecConfig
from pymtp._native import ffi, lib
from pymtp.bench.base import N_CTX
from pymtp.bench.models import resolve_model
from pymtp.bench.prompts import code_prompts, prose_prompts
from pymtp.session import Session


class Tally:
    """Seconds and calls per key, for one variant."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.wall = 0.0
        self.steps = 0
        self.tokens = 0


@contextmanager
def keyed_calls(key_of: Callable[[str, tuple], str], on_call: Callable[[str, float], None]) -> Iterator[None]:
    """Every libpymtp function, while the block runs, also reports (key_of(name, args), seconds)."""
    pc = time.perf_counter

    def timed(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            t = pc()
            try:
                return f(*args)
            finally:
                on_call(key_of(name, args), pc() - t)

        return call

    raw = lib._raw
    names = [n for n in dir(raw) if n.startswith("pymtp_") and ffi.typeof(getattr(raw, n)).kind == "function"]
    before = {n: getattr(lib, n) for n in names}
    try:
        for n in names:
            lib.__dict__[n] = timed(n, before[n])
        yield
    finally:
        lib.__dict__.update(before)


def timer_cost(n: int = 20000) -> float:
    """Seconds the wrapper adds to one call (charged to Python otherwise)."""
    pc, best = time.perf_counter, math.inf
    for _ in range(3):
        t0 = pc()
        for _ in range(n):
            lib.pymtp_last_error()
        plain = pc() - t0
        with keyed_calls(lambda name, a: name, lambda k, s: None):
            t0 = pc()
            for _ in range(n):
                lib.pymtp_last_error()
            timed = pc() - t0
        best = min(best, (timed - plain) / n)
    return max(best, 0.0)


def run_one(session: Session, spec: SpecConfig | None, prompt: str, max_tokens: int, tally: Tally) -> None:
    s = session.speculator(SamplingConfig(temperature=0.0, seed=1), spec)
    s.start(session.model.tokenize(prompt))
    target = s.target._handle()

    def key_of(name: str, args: tuple) -> str:
        short = name.removeprefix("pymtp_")
        if name == "pymtp_decode_rows":
            return f"decode {'trunk' if args[0] == target else 'head'} x{args[4]}"
        if name == "pymtp_draft_greedy":
            return "draft_greedy (head)"
        return short

    def on_call(key: str, seconds: float) -> None:
        tally.seconds[key] += seconds
        tally.calls[key] += 1

    n = 0
    with keyed_calls(key_of, on_call):
        t0 = time.perf_counter()
        while n < max_tokens and s.room() > 1:
            n += len(s.step(max_new=max_tokens - n).emitted)
        tally.wall += time.perf_counter() - t0
    tally.steps += s.stats.n_steps
    tally.tokens += n


def report(name: str, t: Tally, cost: float, plain_step_ms: float | None) -> dict[str, Any]:
    per = 1e3 / t.steps
    native = sum(t.seconds.values())
    n_calls = sum(t.calls.values())
    step_ms = t.wall * per
    rows = {k: (t.seconds[k] * per, t.calls[k] / t.steps) for k in sorted(t.seconds, key=lambda k: -t.seconds[k])}
    python_ms = (t.wall - native - n_calls * cost) * per
    timer_ms = n_calls * cost * per
    print(
        f"\n{name}: {t.steps} steps, {t.tokens} tokens, {t.tokens / t.steps:.2f} tokens/step, "
        f"{step_ms:.2f} ms/step"
        + (f" ({step_ms / plain_step_ms:.3f}x plain)" if plain_step_ms else "")
        + f", {t.tokens / t.wall:.1f} tok/s"
    )
    for k, (ms, calls) in rows.items():
        if ms >= 0.005:
            print(f"  {k:28s} {ms:7.3f} ms/step  {calls:5.2f} calls/step")
    print(f"  {'python (rest)':28s} {python_ms:7.3f} ms/step")
    print(f"  {'timer overhead':28s} {timer_ms:7.3f} ms/step")
    return {
        "steps": t.steps,
        "tokens": t.tokens,
        "step_ms": step_ms,
        "tok_s": t.tokens / t.wall,
        "by_call_ms": {k: v[0] for k, v in rows.items()},
        "calls_per_step": {k: v[1] for k, v in rows.items()},
        "python_ms": python_ms,
        "timer_ms": timer_ms,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--drafts", default="1", help="comma-separated draft lengths (fixed policy)")
    ap.add_argument("--prompts", choices=("code", "prose", "both"), default="both")
    ap.add_argument("--n-prompts", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--draft-vocab", type=int, default=None, help="SpecConfig.draft_vocab (default: its default; 0: all)"
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    prompts = []
    if args.prompts in ("code", "both"):
        prompts += [p.text for p in code_prompts(args.n_prompts)]
    if args.prompts in ("prose", "both"):
        prompts += [p.text for p in prose_prompts(args.n_prompts)]
    variants: dict[str, SpecConfig | None] = {"plain": None}
    for k in (int(x) for x in args.drafts.split(",")):
        extra = {} if args.draft_vocab is None else {"draft_vocab": args.draft_vocab}
        variants[f"mtp-{k}"] = SpecConfig(n_draft=k, policy="fixed", **extra)
    tallies = {v: Tally() for v in variants}
    cost = timer_cost()
    with Session(resolve_model(args.model), n_ctx=N_CTX, n_threads=args.threads) as session, session.lock:
        for spec in variants.values():  # warm-up, not counted
            run_one(session, spec, prompts[0], 16, Tally())
        for _ in range(args.rounds):
            for p in prompts:
                for v, spec in variants.items():
                    run_one(session, spec, p, args.max_tokens, tallies[v])
    print(f"threads {args.threads}, {len(prompts)} prompts x {args.rounds} rounds, {args.max_tokens} tokens, greedy")
    print(f"timer cost {cost * 1e6:.2f} us/call (already taken out of python)")
    out: dict[str, Any] = {"threads": args.threads, "timer_cost_us": cost * 1e6}
    plain_ms = tallies["plain"].wall * 1e3 / tallies["plain"].steps
    for v, t in tallies.items():
        out[v] = report(v, t, cost, None if v == "plain" else plain_ms)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
