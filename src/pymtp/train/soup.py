"""Heads between two heads: the weights of (1 - w) * A + w * B (a "soup"), each written as a
head GGUF and, with --eval, measured on selfdistill's held-out curve batches.

    python -m pymtp.train.soup A.gguf B.gguf --weights 0.25,0.5,0.75 --out-dir DIR [--eval]

Why: a head fine-tuned from another (run7 from the shipped head) trades one held-out domain
for another (run7: +2.7 points on human code, -0.3 on trunk-written text); heads on the line
between the two, which share their start, can keep most of one's gain and the other's level.
Every weight is interpolated, the MoE router's bias included; the file is F16 as a run's head.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def interpolate(a, b, w: float):
    """A new head with (1 - w) * a + w * b for every tensor (a and b: NextNHead, same config)."""
    import copy

    import torch

    out = copy.deepcopy(a)
    sb = b.state_dict()
    with torch.no_grad():
        for name, t in out.state_dict().items():
            t.copy_((1 - w) * t + w * sb[name])
    return out


def held_out(work: Path, heads: dict[str, object], *, seed: int, batches: int, threads: int, log=print) -> dict:
    """selfdistill's curve figures (every held-out domain, human code alone, trunk text alone;
    seq 512, batch 4, chain 3: run8's curve with --seed seed) for each head."""
    import torch

    from . import selfdistill
    from .head import HeadConfig
    from .multistep import DraftVocab

    if threads:
        torch.set_num_threads(threads)
    args = selfdistill.parser().parse_args(
        ["--seq", "512", "--batch", "4", "--seed", str(seed), "--eval-batches", str(batches)]
        + ["--eval-code-batches", str(batches), "--eval-trunk-batches", str(batches)]
    )
    data = selfdistill.load_data(args, work, None)
    W = torch.from_numpy(data.embed.astype(np.float32))
    vocab = DraftVocab(data.vocab, HeadConfig().n_vocab, torch.device("cpu"))
    sets = selfdistill.held_batches(data, args)
    out = {}
    for name, head in heads.items():
        out[name] = selfdistill.held_set_figures(head, W, vocab, sets, args)
        log(f"{name}: " + ", ".join(f"{k} {v}" for k, v in out[name].items() if "agree1" in k or "chain" in k))
    return out


def main(argv=None) -> None:
    from .head import HeadConfig, read_head_gguf, write_head_gguf
    from .selfdistill import default_work

    ap = argparse.ArgumentParser(prog="python -m pymtp.train.soup", description=__doc__)
    ap.add_argument("a", type=Path, help="the head at weight 0")
    ap.add_argument("b", type=Path, help="the head at weight 1")
    ap.add_argument("--weights", default="0.5", help="comma-separated w in (1 - w) * A + w * B")
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--eval", action="store_true", help="also measure A, B and each soup on the held-out curve")
    ap.add_argument("--work", type=Path, default=None, help="selfdistill's work folder (default: the cache's)")
    ap.add_argument("--seed", type=int, default=8, help="the curve's batches (a run's --seed)")
    ap.add_argument("--batches", type=int, default=8, help="held-out batches of each set")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    cfg = HeadConfig()
    a, b = read_head_gguf(args.a, cfg).eval(), read_head_gguf(args.b, cfg).eval()
    heads: dict[str, object] = {"A": a, "B": b}
    record: dict = {"a": str(args.a), "b": str(args.b), "heads": {}}
    for w in (float(x) for x in args.weights.split(",")):
        if not 0.0 <= w <= 1.0:
            raise ValueError(f"a weight is in [0, 1], not {w}")
        head = interpolate(a, b, w)
        out = write_head_gguf(head, args.out_dir / f"soup-{w:g}.gguf")
        heads[f"w={w:g}"] = head
        record["heads"][f"w={w:g}"] = str(out)
        print(f"wrote {out}", flush=True)
    if args.eval:
        record["held_out"] = held_out(
            args.work or default_work(), heads, seed=args.seed, batches=args.batches, threads=args.threads
        )
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
