"""Training-step throughput of selfdistill's variants, interleaved in one run (medians):

    python -m pymtp.train.stepspeed [--work DIR] [--rounds 8]

Variants: padded rows with every routed expert on every row (the earlier form), padded rows
with sparse experts, packed rows with sparse experts. Each round times one step of each, on
fresh batches of the work folder's training shards; the figure that matters is counted
target rows (step 1) per second, since packing puts more of them in a step.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

VARIANTS = (
    ("padded, dense experts", False, False),
    ("padded, sparse experts", False, True),
    ("packed, sparse experts", True, True),
)


def main(argv=None) -> None:
    import torch

    from . import teacher
    from .head import HeadConfig, read_head_gguf
    from .multistep import DraftVocab
    from .selfdistill import SHIPPED, Crops, default_work, train_step

    ap = argparse.ArgumentParser(prog="python -m pymtp.train.stepspeed")
    ap.add_argument("--work", default=None)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--chain", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    work = Path(args.work) if args.work else default_work()
    torch.set_num_threads(args.threads)
    cfg = HeadConfig()
    W = torch.from_numpy(np.load(work / "embed.npy").astype(np.float32))
    vocab = DraftVocab(np.load(work / "vocab.npy"), cfg.n_vocab)
    crops = Crops(teacher.load(work / "teacher", False), args.seq)
    head = read_head_gguf(SHIPPED, cfg)
    head.train()
    opt = torch.optim.AdamW(head.parameters(), lr=1e-6)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {v[0]: [] for v in VARIANTS}
    rows: dict[str, list[int]] = {v[0]: [] for v in VARIANTS}
    for r in range(args.rounds + 1):  # round 0 warms up
        padded = crops.batch(rng, args.batch, "cpu")  # the same rows for both padded variants
        for name, packed, sparse in VARIANTS:
            head.ffn.sparse = sparse
            batch = crops.packed(rng, args.batch, "cpu") if packed else padded
            t0 = time.perf_counter()
            _, figs = train_step(
                head, opt, sched, W, vocab, batch, args.chain, "text", bf16=True, target_temperature=1.0
            )
            dt = time.perf_counter() - t0
            if r:
                times[name].append(dt)
                rows[name].append(figs[0]["rows"])
    base = VARIANTS[0][0]
    base_rate = np.median(rows[base]) / np.median(times[base])
    out = {}
    for name, _, _ in VARIANTS:
        s, n = float(np.median(times[name])), float(np.median(rows[name]))
        out[name] = {"seconds_per_step": round(s, 3), "rows_per_step": n, "rows_per_second": round(n / s, 1)}
        out[name]["vs_first"] = round((n / s) / base_rate, 3)
        print(f"{name:24s} {s:.3f} s/step  {n:.0f} rows/step  {n / s:.0f} rows/s  x{out[name]['vs_first']}", flush=True)
    print(
        json.dumps(
            {
                "rounds": args.rounds,
                "batch": args.batch,
                "seq": args.seq,
                "chain": args.chain,
                "threads": args.threads,
                "torch": torch.__version__,
                "variants": out,
            }
        )
    )


if __name__ == "__main__":
    main()
