"""Measure the drafting policy: does adaptive length help? does cooldown?

Interleaves every configuration on the same prompts, repeats, and prints medians of
tokens/s with the acceptance figures, at greedy and at temperature 0.8.

    python tools/measure_policy.py [--model PATH] [--repeats 3] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import time

import pymtp
from pymtp import SpecConfig

PROMPTS = [
    "def fibonacci(n):\n",
    "import os\nimport sys\n\n\ndef main(argv):\n",
    'class Stack:\n    """A simple stack."""\n\n    def __init__(self):\n',
    "    def __repr__(self):\n        return",
    '# Copyright 2001 Python Software Foundation\n"""Utilities for',
    "try:\n    import json\nexcept ImportError:\n",
]

CONFIGS: dict[str, SpecConfig | None] = {
    "plain": None,
    "k=1": SpecConfig(n_draft=1, adaptive=False),
    "k=2": SpecConfig(n_draft=2, adaptive=False),
    "k=3": SpecConfig(n_draft=3, adaptive=False),
    "k=4": SpecConfig(n_draft=4, adaptive=False),
    "adaptive k<=4": SpecConfig(n_draft=4, adaptive=True),
    "k=3 cooldown 1x2": SpecConfig(n_draft=3, adaptive=False, cooldown=1, cooldown_steps=2),
    "adaptive k<=4 cooldown 1x2": SpecConfig(n_draft=4, adaptive=True, cooldown=1, cooldown_steps=2),
    "k=3 p_min 0.3": SpecConfig(n_draft=3, adaptive=False, p_min=0.3),
}


def run(model, cfg, temperature: float, max_tokens: int, seed: int):
    n_tok = 0
    t0 = time.perf_counter()
    acc = drafted = steps = 0
    for i, p in enumerate(PROMPTS):
        r = pymtp.generate(
            p,
            model,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed + i,
            speculative=cfg if cfg is not None else False,
            ignore_eos=True,
        )
        n_tok += len(r.tokens)
        acc += r.stats.n_accepted
        drafted += r.stats.n_drafted
        steps += r.stats.n_steps
    dt = time.perf_counter() - t0
    return n_tok / dt, (acc / drafted if drafted else 0.0), acc / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--temps", default="0,0.8")
    args = ap.parse_args()
    model = pymtp.load(args.model, n_threads=args.threads)
    print(f"model {model.path.name}: {model.architecture}, n_embd {model.n_embd}, {model.n_layer} blocks")
    for temp in (float(t) for t in args.temps.split(",")):
        rows: dict[str, list[tuple[float, float, float]]] = {k: [] for k in CONFIGS}
        run(model, CONFIGS["k=3"], temp, 16, 0)  # warm-up
        for rep in range(args.repeats):
            for name, cfg in CONFIGS.items():  # interleaved
                rows[name].append(run(model, cfg, temp, args.max_tokens, 1000 * rep))
        base = statistics.median(r[0] for r in rows["plain"])
        print(
            f"\ntemperature {temp}: median of {args.repeats} interleaved runs, {len(PROMPTS)} prompts x "
            f"{args.max_tokens} tokens"
        )
        print(f"{'config':28s} {'tok/s':>8s} {'vs plain':>9s} {'accept':>7s} {'acc/step':>9s}")
        for name, rs in rows.items():
            tps = statistics.median(r[0] for r in rs)
            print(
                f"{name:28s} {tps:8.1f} {tps / base:8.2f}x {statistics.median(r[1] for r in rs):7.2f} "
                f"{statistics.median(r[2] for r in rs):9.2f}"
            )


if __name__ == "__main__":
    main()
