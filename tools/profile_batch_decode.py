"""A decode loop to profile: one target decode of n rows, over and over (issue #28).

    mkfifo /tmp/ctl
    PYMTP_LIBRARY=build-k3/libpymtp.so perf record -F 2000 -D -1 --control fifo:/tmp/ctl -o n8.data -- \\
        python tools/profile_batch_decode.py --type F16 --rows 8 --decodes 300 --threads 1 --perf-ctl /tmp/ctl
    perf report -i n8.data --stdio --sort symbol

Each decode is n rows after `position` tokens of context with logits for every row (a
verification step), then the rows are removed again, exactly as tools/measure_batch_cost.py
times them. Prints the median milliseconds of one decode, so that perf's share of each symbol
can be turned into milliseconds per decode. The model is the default model, as F16 or
quantized into --work (the same copies measure_batch_cost.py makes). Then, per thread of the
process, the milliseconds per decode it ran and the milliseconds it was runnable but waited for
a CPU (/proc schedstat): on a shared machine a thread that waits holds up the others at the
next barrier, which a profile shows as barrier waits.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_batch_cost import model_paths  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--type", default="F16", help="the default model as this type")
    ap.add_argument("--model", default=None, help="a GGUF to decode instead of the default model")
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--position", type=int, default=100)
    ap.add_argument("--decodes", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", default="build/batch_cost")
    ap.add_argument(
        "--perf-ctl",
        default=None,
        help="perf's control FIFO (perf record -D -1 --control fifo:PATH): enabled once the model is ready",
    )
    a = ap.parse_args()

    import pymtp

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    path = a.model or model_paths([a.type], work)[a.type]
    m = pymtp.Model(path)
    t = pymtp.TargetContext(m, n_ctx=a.position + a.rows + 8, n_batch=512, n_threads=a.threads)
    rng = np.random.default_rng(0)
    toks = [int(x) for x in rng.integers(200, min(40000, m.n_vocab), a.position + a.rows)]
    for p0 in range(0, a.position, 512):
        t.decode(toks[p0 : min(a.position, p0 + 512)], p0)
    out = np.ones(a.rows, dtype=np.uint8)
    for _ in range(3):  # warm-up: the graph and its buffers
        t.decode(toks[a.position : a.position + a.rows], a.position, output=out)
        t.seq_rm(a.position)
    if a.perf_ctl:
        with open(a.perf_ctl, "w") as ctl:
            ctl.write("enable\n")
    sched0 = thread_schedstat()
    times = []
    for _ in range(a.decodes):
        t0 = time.perf_counter()
        t.decode(toks[a.position : a.position + a.rows], a.position, output=out)
        times.append(time.perf_counter() - t0)
        t.seq_rm(a.position)
    sched1 = thread_schedstat()
    ms = np.median(times) * 1e3
    print(f"{Path(path).name} n={a.rows} pos={a.position} threads={a.threads}: {ms:.3f} ms median of {a.decodes}")
    # A thread that waits for a CPU (another process runs on it) holds up the others at the next
    # barrier: per thread, ms per decode on a CPU and ms per decode runnable but not running.
    for tid, (run1, wait1) in sorted(sched1.items()):
        run0, wait0 = sched0.get(tid, (0, 0))
        if run1 - run0 > 0.01e6 * a.decodes:
            print(
                f"thread {tid}: on a CPU {(run1 - run0) / 1e6 / a.decodes:.3f} ms/decode, "
                f"waiting for a CPU {(wait1 - wait0) / 1e6 / a.decodes:.3f} ms/decode"
            )


def thread_schedstat() -> dict[int, tuple[int, int]]:
    """{thread id: (ns on a CPU, ns runnable but waiting for one)} of this process (Linux)."""
    out = {}
    for task in Path("/proc/self/task").glob("*"):
        try:
            run, wait, _ = (int(x) for x in (task / "schedstat").read_text().split())
        except (OSError, ValueError):
            continue
        out[int(task.name)] = (run, wait)
    return out


if __name__ == "__main__":
    main()
