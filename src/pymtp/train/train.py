"""Train the tiny model (pymtp.load("tiny")): tokenizer, joint next-token + MTP (t+2) training, GGUF export.

    python -m pymtp.train.train --out src/pymtp/models/pymtp-default.gguf

Deterministic for a given seed, thread count and torch build (CPU).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import data
from .model import Config, GLM4MoEMTP
from .records import RECORDS_DIR, record_path


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def prepare(vocab_size: int, work: Path, tokenizer_out: Path):
    """Train (or reuse) the tokenizer, return (tokenizer, train stream, held-out stream)."""
    from tokenizers import Tokenizer

    train_files, held_files = data.split_files()
    train_texts = [t for t in (data.read_text(f) for f in train_files) if t]
    held_texts = [t for t in (data.read_text(f) for f in held_files) if t]
    if tokenizer_out.exists():
        tok = Tokenizer.from_file(str(tokenizer_out))
    else:
        tok = data.train_tokenizer(train_texts, vocab_size)
        tokenizer_out.parent.mkdir(parents=True, exist_ok=True)
        tok.save(str(tokenizer_out))
    work.mkdir(parents=True, exist_ok=True)
    tr = data.encode_stream(tok, train_texts)
    he = data.encode_stream(tok, held_texts)
    print(
        f"files: train {len(train_texts)}, held-out {len(held_texts)}; tokens: train {len(tr)}, held-out {len(he)}",
        flush=True,
    )
    return tok, tr, he


def batches(stream: np.ndarray, batch: int, seq: int, rng: np.random.Generator):
    n = len(stream) - seq - 1
    while True:
        starts = rng.integers(0, n, size=batch)
        yield torch.from_numpy(np.stack([stream[s : s + seq + 1] for s in starts]).astype(np.int64))


def batch_at(stream: np.ndarray, batch: int, seq: int, seed: int, step: int) -> torch.Tensor:
    """The training batch of a step depends only on (seed, step), so a resumed run is identical."""
    return next(batches(stream, batch, seq, np.random.default_rng([seed, step])))


def losses(model: GLM4MoEMTP, x: torch.Tensor):
    logits, mlogits = model(x)
    V = logits.shape[-1]
    l_ntp = F.cross_entropy(logits.reshape(-1, V), x[:, 1:].reshape(-1))
    l_mtp = F.cross_entropy(mlogits.reshape(-1, V), x[:, 2:].reshape(-1))
    return l_ntp, l_mtp, logits, mlogits


@torch.no_grad()
def quick_eval(model, x):
    model.eval()
    l_ntp, l_mtp, logits, mlogits = losses(model, x)
    g = logits.argmax(-1)
    acc = (g == x[:, 1:]).float().mean().item()
    accept = (mlogits.argmax(-1) == g[:, 1:]).float().mean().item()
    model.train()
    return l_ntp.item(), l_mtp.item(), acc, accept


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m pymtp.train.train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default="src/pymtp/models/pymtp-default.gguf")
    ap.add_argument("--work", default="build/pymtp-train", help="checkpoint / scratch directory")
    ap.add_argument("--records", default=str(RECORDS_DIR), help="loss curve, run record, tokenizer, reference")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512, help="training window (<= n_ctx)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--mtp-weight", type=float, default=0.5)
    ap.add_argument("--bias-rate", type=float, default=1e-3, help="exp_probs_b load-balance update rate")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--ckpt-every", type=int, default=25, help="save a resumable state every N steps")
    ap.add_argument(
        "--resume", action="store_true", help="continue from <work>/state.pt (same result as an uninterrupted run)"
    )
    ap.add_argument("--bench", type=int, default=0, help="only time this many steps and exit")
    for f, v in Config().to_dict().items():
        if f == "n_vocab":
            continue
        t = type(v)
        ap.add_argument(
            "--" + f.replace("_", "-"),
            type=(lambda s: s.lower() in ("1", "true", "yes")) if t is bool else t,
            default=v,
        )
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    seed_all(args.seed)
    out = Path(args.out)
    work = Path(args.work)
    tok_path = record_path(out, ".tokenizer.json", args.records)
    tok, tr, he = prepare(args.vocab, work, tok_path)

    cfg = Config(n_vocab=tok.get_vocab_size(), **{f: getattr(args, f) for f in Config().to_dict() if f != "n_vocab"})
    assert args.seq <= cfg.n_ctx
    seed_all(args.seed)
    model = GLM4MoEMTP(cfg)
    print(f"config: {cfg.to_dict()}  params: {model.num_params()}", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )

    erng = np.random.default_rng(args.seed + 1)
    eval_x = next(batches(he, 8, args.seq, erng))

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        p = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))

    moe = model.mtp.block.ffn
    curve = []
    work.mkdir(parents=True, exist_ok=True)
    csv_path = record_path(out, ".loss.csv", args.records)
    header = [
        "step",
        "tokens",
        "lr",
        "loss_ntp",
        "loss_mtp",
        "heldout_loss_ntp",
        "heldout_loss_mtp",
        "heldout_acc",
        "heldout_accept",
        "elapsed_s",
    ]
    state_path = work / "state.pt"
    start, ema_n, ema_m, t_prev = 0, None, None, 0.0
    if args.resume and state_path.exists():
        st = torch.load(state_path, map_location="cpu", weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start, ema_n, ema_m, curve, t_prev = st["step"], st["ema_n"], st["ema_m"], st["curve"], st["elapsed"]
        print(f"resumed at step {start}", flush=True)
    fcsv = open(csv_path, "w", newline="")
    wr = csv.writer(fcsv)
    wr.writerow(header)
    wr.writerows(curve)
    t0 = time.time() - t_prev
    n_steps = args.bench or args.steps
    ev = (None,) * 4
    for step in range(start, n_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x = batch_at(tr, args.batch, args.seq, args.seed, step)
        l_ntp, l_mtp, _, _ = losses(model, x)
        loss = l_ntp + args.mtp_weight * l_mtp
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():  # aux-loss-free balancing of the MTP experts
            load = moe.last_load
            moe.exp_probs_b += args.bias_rate * torch.sign(load.mean() - load)  # type: ignore[union-attr,operator]
        ln, lm = l_ntp.item(), l_mtp.item()
        ema_n = ln if ema_n is None else 0.95 * ema_n + 0.05 * ln
        ema_m = lm if ema_m is None else 0.95 * ema_m + 0.05 * lm
        last = step == n_steps - 1
        if step % args.eval_every == 0 or last:
            ev = quick_eval(model, eval_x)
        else:
            ev = (None,) * 4
        el = time.time() - t0
        row = [
            step,
            (step + 1) * args.batch * args.seq,
            lr_at(step),
            round(ln, 5),
            round(lm, 5),
            *(None if v is None else round(v, 5) for v in ev),
            round(el, 1),
        ]
        wr.writerow(row)
        fcsv.flush()
        curve.append(row)
        if step % 10 == 0 or last:
            extra = (
                ""
                if ev[0] is None
                else f" | held-out ntp {ev[0]:.3f} mtp {ev[1]:.3f} acc {ev[2]:.3f} accept {ev[3]:.3f}"
            )
            print(
                f"step {step:5d} loss ntp {ema_n:.3f} mtp {ema_m:.3f} lr {lr_at(step):.2e} "
                f"{el / (step + 1):.2f}s/step{extra}",
                flush=True,
            )
        if args.ckpt_every and (step + 1) % args.ckpt_every == 0 and not args.bench:
            torch.save(
                {
                    "model": model.state_dict(),
                    "opt": opt.state_dict(),
                    "step": step + 1,
                    "ema_n": ema_n,
                    "ema_m": ema_m,
                    "curve": curve,
                    "elapsed": time.time() - t0,
                },
                work / "state.tmp",
            )
            os.replace(work / "state.tmp", state_path)
    fcsv.close()
    if args.bench:
        print(f"bench: {(time.time() - t0) / args.bench:.3f} s/step")
        return
    ckpt = work / "model.pt"
    torch.save({"config": cfg.to_dict(), "state_dict": model.state_dict(), "args": vars(args)}, ckpt)
    meta = {
        "config": cfg.to_dict(),
        "args": vars(args),
        "params": model.num_params(),
        "train_seconds": round(time.time() - t0, 1),
        "final": dict(zip(["heldout_loss_ntp", "heldout_loss_mtp", "heldout_acc", "heldout_accept"], ev)),
        "final_train_loss_ntp_ema": ema_n,
        "final_train_loss_mtp_ema": ema_m,
        "torch": torch.__version__,
    }
    record_path(out, ".train.json", args.records).write_text(json.dumps(meta, indent=1) + "\n")
    print(f"checkpoint: {ckpt}", flush=True)

    from .export import export_all

    export_all(model, tok, out, he, args.records)


if __name__ == "__main__":
    main()
