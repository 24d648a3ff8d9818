"""Decode speed by thread count, to choose the default (run it idle and under load).

    python tools/measure_threads.py [--model default] [--threads 1,2] [--repeats 5] [--tokens 64]

Each repeat runs every thread count once (interleaved), a greedy plain and a speculative
generation of --tokens tokens from the same prompt; medians of tokens/s are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import pymtp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    counts = [int(x) for x in args.threads.split(",")]
    model = pymtp.Model(pymtp.default_model.resolve(args.model))
    sessions = {n: pymtp.Session(model, n_threads=n, n_ctx=1024) for n in counts}
    prompt = "def fibonacci(n):"
    times: dict = {(n, spec): [] for n in counts for spec in (False, True)}
    for _ in range(args.repeats):
        for n, s in sessions.items():
            for spec in (False, True):
                pymtp.generate("x", s, max_tokens=1, speculative=spec)      # another prompt: no reuse
                t0 = time.perf_counter()
                r = pymtp.generate(prompt, s, max_tokens=args.tokens, ignore_eos=True, speculative=spec)
                times[n, spec].append(len(r.tokens) / (time.perf_counter() - t0))
    print(f"cpu_count {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}, {pymtp.system_info()}")
    for (n, spec), v in times.items():
        print(f"threads {n} {'speculative' if spec else 'plain      '}: median {statistics.median(v):7.1f} tok/s "
              f"(min {min(v):.1f}, max {max(v):.1f})")


if __name__ == "__main__":
    main()
