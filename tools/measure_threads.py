"""Decode speed by thread count, on an idle machine and under background load.

    python tools/measure_threads.py [--model default] [--threads 1,2] [--load 0,1,2] [--repeats 3]

Background load: that many busy processes (a Python loop each), started before and stopped
after each measurement. Each cell: the median over repeats of the tokens/s of a 64-token greedy
generation, plain and speculative, interleaved across thread counts.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time

import pymtp


def _spin(stop) -> None:
    while not stop.is_set():
        pass


def run(session, speculative) -> float:
    pymtp.generate("def fibonacci(n):", session, max_tokens=1)
    t0 = time.perf_counter()
    r = pymtp.generate("def fibonacci(n):", session, max_tokens=64, ignore_eos=True, speculative=speculative)
    return len(r.tokens) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--load", default="0,1,2")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    threads = [int(x) for x in args.threads.split(",")]
    sessions = {t: pymtp.load(args.model, n_threads=t, n_ctx=512) for t in threads}
    table = {}
    for load in [int(x) for x in args.load.split(",")]:
        stop = mp.Event()
        procs = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(load)]
        for p in procs:
            p.start()
        time.sleep(0.5)
        try:
            rows = {(t, s): [] for t in threads for s in ("plain", "mtp")}
            for _ in range(args.repeats):
                for t in threads:
                    rows[(t, "plain")].append(run(sessions[t], False))
                    rows[(t, "mtp")].append(run(sessions[t], True))
        finally:
            stop.set()
            for p in procs:
                p.join(5)
        for (t, s), v in rows.items():
            table[f"load={load} threads={t} {s}"] = statistics.median(v)
            print(
                f"background busy processes {load}: threads {t} {s:5s} {statistics.median(v):8.1f} tok/s "
                f"(runs: {', '.join(f'{x:.1f}' for x in v)})",
                flush=True,
            )
    print(json.dumps({"system": pymtp.system_info(), "cpu_count": mp.cpu_count(), "tok_s": table}, indent=1))


if __name__ == "__main__":
    main()
