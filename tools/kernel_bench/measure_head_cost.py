"""What the MTP head's decodes cost on a model, against the trunk's (issue #28: the ~1.5B echo
fixture's mtp-3 step spends 12% drafting and 10% catching up on the prompt):

    python tools/kernel_bench/measure_head_cost.py [--model echo-80-1.5b] [--threads 2]
        [--rows 1,4,313] [--vocab 0,4096] [--repeats 9] [--pos 320]

For each row count n: a trunk decode of n rows (logits of the last row only; past 8 rows only
with --trunk-prefill), and
a head decode of n rows without logits (the catch-up on the prompt) and with the last row's
logits (a draft), once per draft vocabulary size (0: the whole vocabulary, llama.cpp's own
projection; N: the N most frequent tokens, pymtp's trimmed projection). Each decode is timed
alone, the kinds alternating within each repeat; medians in ms. The head's trimmed matrix is
named with its type and bytes. Run it under /work/tools/bench-quiet (it prints speeds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import pymtp
from pymtp.bench.models import resolve_model
from pymtp.draft_vocab import frequent_tokens
from pymtp.model import last_row_only


def head_matrix(path) -> tuple[str, int, int]:
    """(type, bytes, rows) of the matrix the head projects with (nextn.shared_head_head or output)."""
    from gguf import GGUFReader

    ts = {t.name: t for t in GGUFReader(path).tensors}
    t = next((v for k, v in ts.items() if k.endswith("nextn.shared_head_head.weight")), None) or ts["output.weight"]
    return t.tensor_type.name, int(t.n_bytes), int(t.shape[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="echo-80-1.5b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,4,313")
    ap.add_argument("--vocab", default="0,4096", help="draft vocabulary sizes (0: all)")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--pos", type=int, default=320, help="first position of the timed rows")
    ap.add_argument("--trunk-prefill", action="store_true", help="time the trunk at more than 8 rows too")
    args = ap.parse_args(argv)
    rows = [int(x) for x in args.rows.split(",")]
    vocabs = [int(x) for x in args.vocab.split(",")]
    path = resolve_model(args.model)
    htype, hbytes, hrows = head_matrix(path)
    n_embd = 0
    n_ctx = args.pos + max(rows) + 8
    times: dict[str, list[float]] = {}
    pc = time.perf_counter
    with pymtp.load(path, n_ctx=n_ctx, n_threads=args.threads) as s:
        m = s.model
        n_embd = m.n_embd
        rng = np.random.default_rng(0)
        toks = rng.integers(300, min(m.n_vocab, 2000), size=n_ctx).tolist()
        with pymtp.TargetContext(m, n_ctx=n_ctx, n_batch=n_ctx, n_threads=args.threads) as t:
            for a in range(0, args.pos, 256):
                t.decode(toks[a : min(args.pos, a + 256)], a, output=last_row_only(min(args.pos, a + 256) - a))
            hid = np.ascontiguousarray(rng.standard_normal((max(rows), m.n_embd)), dtype=np.float32)
            with pymtp.DraftContext(t, n_batch=n_ctx, n_threads=args.threads) as d:
                d.decode(
                    toks[1 : args.pos],
                    1,
                    hid[0],
                    np.repeat(hid[:1], args.pos - 2, axis=0),
                    output=np.zeros(args.pos - 1, np.uint8),
                )
                vsets = {v: (frequent_tokens(m, v) if 0 < v < m.n_vocab else []) for v in vocabs}
                for rep in range(args.repeats + 1):  # the first repeat warms up, not counted
                    for n in rows:
                        seg = toks[args.pos : args.pos + n]
                        if n <= 8 or args.trunk_prefill:
                            t0 = pc()
                            t.decode(seg, args.pos, output=last_row_only(n))
                            dt = pc() - t0
                            t.seq_rm(args.pos)
                            times.setdefault(f"trunk x{n} (last row's logits)", []).append(dt)
                        for v, ids in vsets.items():
                            d.set_vocab(ids)
                            for outputs in (False, True):
                                if outputs and n > 8:
                                    continue
                                flags = last_row_only(n) if outputs else np.zeros(n, np.uint8)
                                t0 = pc()
                                d.decode(seg, args.pos, hid[0], hid[1:n] if n > 1 else None, output=flags)
                                dt = pc() - t0
                                d.seq_rm(args.pos)
                                what = "draft (last row's logits)" if outputs else "catch-up (no logits)"
                                times.setdefault(f"head x{n} {what}, vocab {v or 'all'}", []).append(dt)
                    if rep == 0:
                        times.clear()
    print(f"{path.name}, {args.threads} threads, position {args.pos}, medians of {args.repeats}")
    print(f"head matrix: {htype}, {hrows} rows, {hbytes / 1e6:.1f} MB ({hbytes / hrows:.0f} bytes a row)")
    row = hbytes / hrows
    for v in vocabs:
        if 0 < v < hrows:
            print(
                f"  vocab {v}: its copy in the head's type {v * row / 1e6:.1f} MB, in F16 {v * 2 * n_embd / 1e6:.1f} MB"
            )
    for k, ts in times.items():
        print(f"  {k:52s} {statistics.median(ts) * 1e3:8.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
