"""Short training probes side by side: learning rates and step precisions (issue #30).

    python -m pymtp.train.probe --arm 3e-4 --arm 1e-3:bf16 --steps 40

Every arm starts from the same head (--init, the shipped one), sees the same batches in the
same order, and the arms take turns step by step, so their step times are measured
interleaved on the same machine state. The learning rate is constant after a short linear
warm-up (a probe asks which rate moves the held-out figures, not where a schedule ends).
Held-out figures (float32, fixed batches of the held-out split) every --eval-every steps.
Reads selfdistill's work folder (teacher shards, embed.npy, vocab.npy); writes JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def parse_arm(text: str) -> dict:
    """'3e-4', '3e-4:bf16', '3e-4:bf16:t0.5' (target temperature 0.5) -> {"name", "lr", "bf16", "temp"}."""
    lr, *opts = text.split(":")
    arm = {"name": text, "lr": float(lr), "bf16": False, "temp": 1.0}
    for o in opts:
        if o in ("fp32", "bf16"):
            arm["bf16"] = o == "bf16"
        elif o.startswith("t") and o[1:].replace(".", "", 1).isdigit() and float(o[1:]) > 0:
            arm["temp"] = float(o[1:])
        else:
            raise ValueError(f"an arm is LR[:fp32|:bf16][:tTEMP], got {text!r}")
    return arm


def run(args, log=print) -> dict:
    import torch

    from . import teacher
    from .head import HeadConfig, read_head_gguf
    from .multistep import DraftVocab
    from .selfdistill import Crops, held_figures, train_step

    if args.threads:
        torch.set_num_threads(args.threads)
    work = args.work
    cfg = HeadConfig()
    W = torch.from_numpy(np.load(work / "embed.npy").astype(np.float32))
    vocab = DraftVocab(np.load(work / "vocab.npy"), cfg.n_vocab)
    crops = Crops(teacher.load(work / "teacher", False), args.seq)
    held = Crops(teacher.load(work / "teacher", True), args.seq)
    eval_rng = np.random.default_rng(args.seed + 1)
    eval_batches = [held.batch(eval_rng, args.batch, "cpu") for _ in range(args.eval_batches)]
    arms = [parse_arm(a) for a in args.arm]
    warm = max(1, args.warmup)
    for a in arms:
        a["head"] = read_head_gguf(args.init, cfg).train()
        a["opt"] = torch.optim.AdamW(a["head"].parameters(), lr=a["lr"], weight_decay=0.0, betas=(0.9, 0.95))
        a["sched"] = torch.optim.lr_scheduler.LambdaLR(a["opt"], lambda s: min(1.0, (s + 1) / warm))
        a["step_seconds"], a["train_loss"] = [], []
        a["curve"] = [{"step": 0} | held_figures(a["head"], W, vocab, eval_batches, args.chain, args.feed)]
    log(f"step 0: {_brief(arms[0]['curve'][-1])}")
    rng = np.random.default_rng(args.seed)
    for step in range(1, args.steps + 1):
        batch = crops.batch(rng, args.batch, "cpu")
        for a in arms:
            t0 = time.perf_counter()
            loss, _ = train_step(
                a["head"],
                a["opt"],
                a["sched"],
                W,
                vocab,
                batch,
                args.chain,
                args.feed,
                bf16=a["bf16"],
                target_temperature=a["temp"],
            )
            a["step_seconds"].append(time.perf_counter() - t0)
            a["train_loss"].append(round(float(loss.detach()), 5))
        log(
            f"step {step}: "
            + ", ".join(f"{a['name']} loss {a['train_loss'][-1]:.4f} {a['step_seconds'][-1]:.1f} s" for a in arms)
        )
        if step % args.eval_every == 0 or step == args.steps:
            for a in arms:
                a["curve"].append(
                    {"step": step} | held_figures(a["head"], W, vocab, eval_batches, args.chain, args.feed)
                )
                log(f"  {a['name']}: {_brief(a['curve'][-1])}")
    return {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "arms": [
            {
                "name": a["name"],
                "lr": a["lr"],
                "bf16": a["bf16"],
                "target_temperature": a["temp"],
                "median_step_seconds": round(float(np.median(a["step_seconds"])), 3),
                "train_loss": a["train_loss"],
                "curve": a["curve"],
            }
            for a in arms
        ],
    }


def _brief(row: dict) -> str:
    return ", ".join(f"{k} {row[k]}" for k in ("held_agree1", "held_chain2", "held_chain3", "held_kl1") if k in row)


def main(argv=None) -> None:
    from .selfdistill import SHIPPED, default_work

    ap = argparse.ArgumentParser(
        prog="python -m pymtp.train.probe", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--arm", action="append", required=True, help="LR, LR:fp32 or LR:bf16 (repeatable)")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--init", type=Path, default=SHIPPED)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--chain", type=int, default=3)
    ap.add_argument("--feed", choices=("text", "draft"), default="text")
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--eval-batches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    args.work = args.work or default_work()
    res = run(args)
    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
