"""Why a trunk verify of n rows costs more against a plain step in situ than c(n)/c(1) in
tools/measure_batch_cost.py: the same decodes in one process, one factor changed at a time.

    PYMTP_LIBRARY=LIB python tools/kernel_bench/verify_in_situ.py [--model echo-80-1.5b]
        [--threads 2] [--rows 4] [--repeats 15] [--idle-ms 0,5]

After a real prompt (the bench's code prompt, 65 tokens on the fixture; its length is the
position), each repeat times, in a shuffled order (each after one untimed decode of its kind,
the KV trimmed back after every decode):
  c1                a one-row decode right after the previous decode (as plain steps run)
  c1 after idle     the same after sleeping IDLE ms (the microbenchmark's decodes wait on a pipe)
  cN                an n-row decode, logits and hidden rows of every row (the verify)
  cN last out       an n-row decode, logits of the last row only (the output matrix at one row)
  c1, cN at P       after the longer code prompt (P tokens, 320 on the fixture)
Medians in ms and against c1. Run it under /work/tools/bench-quiet (it prints speeds).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pymtp import Model, TargetContext
from pymtp.bench.base import N_CTX
from pymtp.bench.models import resolve_model
from pymtp.bench.prompts import code_prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="echo-80-1.5b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--idle-ms", default="5")
    a = ap.parse_args()
    n = a.rows
    model = Model(str(resolve_model(a.model)))
    # the bench's prompt (`pymtp bench --n-prompts 1`) and the longer one of --n-prompts 2
    near_prompt = model.tokenize(code_prompts(1)[0].text)
    far_prompt = max((model.tokenize(p.text) for p in code_prompts(2)), key=len)
    near = TargetContext(model, n_ctx=N_CTX, n_threads=a.threads)
    far = TargetContext(model, n_ctx=N_CTX, n_threads=a.threads)
    for ctx, prompt in ((near, near_prompt), (far, far_prompt)):
        ctx.decode(prompt, 0, output=np.zeros(len(prompt), np.uint8))
    rng = np.random.default_rng(0)
    extra = [int(x) for x in rng.integers(200, 20000, n)]
    pos_near, pos_far = len(near_prompt), len(far_prompt)

    def one(ctx: TargetContext, pos: int, rows: int, out: np.ndarray | None, idle: float = 0.0) -> float:
        if idle:
            time.sleep(idle)
        t0 = time.perf_counter()
        ctx.decode(extra[:rows], pos, output=out)
        dt = time.perf_counter() - t0
        ctx.seq_rm(pos)
        return dt * 1e3

    last = np.zeros(n, np.uint8)
    last[-1] = 1
    cases = {
        "c1": lambda: one(near, pos_near, 1, None),
        f"c{n}": lambda: one(near, pos_near, n, None),
        f"c{n} last out": lambda: one(near, pos_near, n, last),
        f"c1 at {pos_far}": lambda: one(far, pos_far, 1, None),
        f"c{n} at {pos_far}": lambda: one(far, pos_far, n, None),
    }
    for ms in (float(x) for x in a.idle_ms.split(",") if float(x) > 0):
        cases[f"c1 after idle {ms:g} ms"] = lambda ms=ms: one(near, pos_near, 1, None, ms / 1e3)
        cases[f"c{n} after idle {ms:g} ms"] = lambda ms=ms: one(near, pos_near, n, None, ms / 1e3)
    names = list(cases)
    times: dict[str, list[float]] = {k: [] for k in names}
    for k in names:  # warm-up
        cases[k]()
    order = np.random.default_rng(1)
    for _ in range(a.repeats):
        for i in order.permutation(len(names)):
            k = names[i]
            cases[k]()  # the previous decode was of another kind: one untimed decode of this one
            times[k].append(cases[k]())
    med = {k: float(np.median(v)) for k, v in times.items()}
    print(
        f"# {a.model}, {a.threads} threads, prompt {pos_near} tokens, medians of {a.repeats} "
        "(each after one untimed decode of the same kind)"
    )
    for k in names:
        lo, hi = np.percentile(times[k], [25, 75])
        print(f"{k:24s} {med[k]:8.2f} ms  {med[k] / med['c1']:5.2f}x c1   (quartiles {lo:.2f}-{hi:.2f})")


if __name__ == "__main__":
    main()
