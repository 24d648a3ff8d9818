#!/usr/bin/env python3
"""Soak test: resident memory over many generate() calls and load/close cycles.

    PYTHONPATH=src python3 tools/soak.py [--generations 1000] [--cycles 100] [--family glm4moe]

Prints the resident set size (from /proc/self/statm) after a warm-up and at
intervals, the growth over each phase, and the growth per call. Every output
is also checked against the first one (greedy decoding is deterministic), so
a soak that leaks or corrupts state shows up as a number or a failure.
Exit status 1 when a bound (--max-growth-mib, per phase) is exceeded.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--generations", type=int, default=1000)
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--family", default="glm4moe")
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--max-growth-mib", type=float, default=4.0)
    args = ap.parse_args(argv)

    import pymtp

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # pymtp_testing: the checkout's test helpers
    from pymtp_testing import fixtures

    path = fixtures.fixture_path(args.family, cache_dir=os.path.join(tempfile.gettempdir(), "pymtp-soak"))
    prompts = ["Hello", "def add(a, b):", "The quick brown fox", "1, 2, 3,"]
    kw = dict(max_tokens=args.max_tokens, ignore_eos=True)
    failed = False

    print(f"pymtp soak: {args.family} fixture, {pymtp.build_info()}")
    print(f"start: RSS {rss_mib():.1f} MiB")

    # ---- phase 1: generate() calls on one model ------------------------------------------------
    m = pymtp.load(path, n_ctx=64)
    want = {p: pymtp.generate(p, m, **kw).tokens for p in prompts}
    for i in range(args.warmup):
        pymtp.generate(prompts[i % 4], m, speculative=i % 5 != 0, **kw)
    gc.collect()
    base = rss_mib()
    print(f"generate: after {args.warmup} warm-up calls RSS {base:.2f} MiB")
    t0 = time.perf_counter()
    step = max(1, args.generations // 5)
    for i in range(args.generations):
        p = prompts[i % 4]
        r = pymtp.generate(p, m, speculative=i % 5 != 0, **kw)
        if r.tokens != want[p]:
            print(f"  call {i}: output differs from the first run: {r.tokens} != {want[p]}")
            failed = True
        if (i + 1) % step == 0:
            print(f"  {i + 1:6d} calls  RSS {rss_mib():.2f} MiB  (+{rss_mib() - base:.2f})")
    gc.collect()
    grown = rss_mib() - base
    dt = time.perf_counter() - t0
    print(
        f"generate: {args.generations} calls in {dt:.1f} s, RSS growth {grown:+.2f} MiB "
        f"({grown * 2**20 / max(1, args.generations):+.0f} B/call)"
    )
    failed |= grown > args.max_growth_mib
    m.close()

    # ---- phase 2: load / generate / close cycles ----------------------------------------------
    def cycle():
        with pymtp.load(path, n_ctx=64) as mm:
            r = pymtp.generate(prompts[0], mm, **kw)
            return r.tokens == want[prompts[0]]

    for _ in range(max(1, args.warmup // 10)):
        cycle()
    gc.collect()
    base = rss_mib()
    print(f"load/close: after warm-up RSS {base:.2f} MiB")
    t0 = time.perf_counter()
    step = max(1, args.cycles // 5)
    for i in range(args.cycles):
        if not cycle():
            print(f"  cycle {i}: output differs from the first run")
            failed = True
        if (i + 1) % step == 0:
            print(f"  {i + 1:6d} cycles RSS {rss_mib():.2f} MiB  (+{rss_mib() - base:.2f})")
    gc.collect()
    grown = rss_mib() - base
    dt = time.perf_counter() - t0
    print(
        f"load/close: {args.cycles} cycles in {dt:.1f} s, RSS growth {grown:+.2f} MiB "
        f"({grown * 1024 / max(1, args.cycles):+.1f} KiB/cycle)"
    )
    failed |= grown > args.max_growth_mib
    print("FAIL" if failed else "OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
