"""Train the default model's NextN head on the frozen SmolLM2 trunk, by self-distillation.

    python -m pymtp.train                      # both stages, every step cached in build/pymtp-head
    python -m pymtp.train --stage2-steps 0     # stage 1 alone

Steps (each cached in --work; delete a file to redo its step):

1. ``teacher.gguf``: the trunk (pymtp.trunk) re-expressed as glm4moe with F16 matrices,
   the type the default serves, plus a warm-started head (hidden rows need an MTP file).
2. ``texts.jsonl``: chat answers and prose continuations the trunk writes (corpus.py).
3. ``rows.npz``: llama.cpp's own hidden rows h(p) (output-normed, what the head is fed) for
   every training and held-out window, through pymtp.
4. stage 1 (``stage1/``): the head, trained from the trunk's last block so that
   softmax(W h_head(p)) matches the trunk's distribution at p+1, softmax(W h(p+1)), for
   x(p+2); W is the trunk's tied output matrix, frozen. The KL runs over the most frequent
   tokens of the training text (covering ~99% of its tokens) to keep a step cheap on CPU,
   plus a small MSE on the hidden row that anchors the rest. Mostly stdlib code.
5. ``texts2.jsonl`` / ``rows2.npz``: ~1,000 more trunk texts (every instruction and
   opening, and continuations of stdlib code), half of the training ones and all held-out
   ones greedy, generated 8 at a time; their rows, plus 100k tokens of stdlib code.
6. stage 2: the stage-1 head trained further on those, at a lower learning rate.
7. ``src/pymtp/models/smollm2-135m-nextn.gguf`` (the head alone, F16) with the loss curve
   of both stages.

Seeded; deterministic for a given seed, thread count and torch build.
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

from . import corpus, data
from .head import (
    HeadConfig,
    NextNHead,
    gguf_weights,
    init_from_trunk_block,
    num_params,
    read_head_gguf,
    write_head_gguf,
)
from .records import RECORDS_DIR, record_path

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
HEAD_FILE = "smollm2-135m-nextn.gguf"
WINDOW = 512


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_teacher(work: Path, cfg: HeadConfig, seed: int) -> tuple[Path, NextNHead]:
    """The F16 glm4moe trunk with a warm-started head; returns (file, that head)."""
    from pymtp import convert, trunk

    src = trunk.trunk_path()
    plain = work / "trunk-glm4moe-f16.gguf"
    if not plain.exists():
        convert.write_glm4moe(src, plain, f16=True)
    last = cfg.n_trunk - 1
    names = {
        f"blk.{last}.{n}.weight"
        for n in (
            "attn_norm",
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "post_attention_norm",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        )
    }
    seed_all(seed)
    head = NextNHead(cfg)
    init_from_trunk_block(head, gguf_weights(plain, names | {"output_norm.weight"}), last)
    teacher = work / "teacher.gguf"
    if not teacher.exists():
        write_head_gguf(head, work / "head-init.gguf")
        convert.write_glm4moe(src, teacher, head=work / "head-init.gguf", f16=True)
    return teacher, head


def windows(model, texts: list[dict]) -> list[tuple[str, bool, list[int]]]:
    """(source, held_out, tokens) windows of at most WINDOW tokens: stdlib files cut into
    windows, one window per generated text."""
    out = []
    train_files, held_files = data.split_files()
    for held, files in ((False, train_files), (True, held_files)):
        for rel in files:
            text = data.read_text(rel)
            if not text:
                continue
            toks = model.tokenize(text, add_special=False)
            for i in range(0, len(toks), WINDOW):
                w = toks[i : i + WINDOW]
                if len(w) >= 64:
                    out.append(("code", held, w))
    for t in texts:
        out.append((t["kind"], t["held_out"], (t["prompt"] + t["completion"])[:WINDOW]))
    return out


def extract_rows(teacher: Path, wins, out: Path, code_tokens: int, seed: int, n_threads: int | None = None) -> None:
    """llama.cpp's hidden rows for a seeded sample of the windows (code capped at code_tokens
    for training; every generated window; 40 held-out code windows)."""
    import pymtp

    rng = random.Random(seed)
    code_tr = [w for w in wins if w[0] == "code" and not w[1]]
    code_he = [w for w in wins if w[0] == "code" and w[1]]
    rng.shuffle(code_tr)
    rng.shuffle(code_he)
    picked, n = [], 0
    for w in code_tr:
        if n >= code_tokens:
            break
        picked.append(w)
        n += len(w[2])
    picked += code_he[:40] + [w for w in wins if w[0] != "code"]
    model = pymtp.Model(teacher)
    ctx = pymtp.TargetContext(model, n_ctx=WINDOW, n_batch=WINDOW, n_threads=n_threads)
    toks, rows, offs, kinds, held = [], [], [0], [], []
    t0 = time.time()
    for i, (kind, h, w) in enumerate(picked):
        ctx.seq_rm(0)
        flags = np.zeros(len(w), np.uint8)
        flags[-1] = 1
        ctx.decode(w, 0, output=flags)
        rows.append(ctx.hidden().astype(np.float16))  # a copy: the view dies at the next decode
        toks.append(np.asarray(w, np.int32))
        offs.append(offs[-1] + len(w))
        kinds.append(kind)
        held.append(h)
        if i % 100 == 0:
            print(
                f"  rows {i + 1}/{len(picked)} windows, {offs[-1]} tokens, {offs[-1] / (time.time() - t0):.0f} tok/s",
                flush=True,
            )
    ctx.close()
    model.close()
    np.savez(
        out,
        tokens=np.concatenate(toks),
        hidden=np.concatenate(rows),
        offsets=np.asarray(offs, np.int64),
        kinds=np.asarray(kinds),
        held_out=np.asarray(held),
    )


class Rows:
    """The extracted windows; batches of (x(p+1), h(p), h(p+1)) crops."""

    def __init__(self, path: Path, held_out: bool):
        z = np.load(path)
        self.tokens, self.hidden, offs = z["tokens"], z["hidden"], z["offsets"]
        keep = np.flatnonzero(z["held_out"] == held_out)
        self.spans = [(int(offs[i]), int(offs[i + 1])) for i in keep if offs[i + 1] - offs[i] >= 8]
        self.kinds = [str(z["kinds"][i]) for i in keep if offs[i + 1] - offs[i] >= 8]

    def batch(self, rng: np.random.Generator, n: int, seq: int):
        x, h, ht, mask = (
            np.zeros((n, seq), np.int64),
            np.zeros((n, seq, self.hidden.shape[1]), np.float32),
            np.zeros((n, seq, self.hidden.shape[1]), np.float32),
            np.zeros((n, seq), bool),
        )
        for b, i in enumerate(rng.integers(0, len(self.spans), size=n)):
            s, e = self.spans[i]
            L = min(seq, e - s - 1)  # positions p with p+1 inside the window
            o = s + int(rng.integers(0, e - s - 1 - L + 1))
            x[b, :L] = self.tokens[o + 1 : o + 1 + L]
            h[b, :L] = self.hidden[o : o + L]
            ht[b, :L] = self.hidden[o + 1 : o + 1 + L]
            mask[b, :L] = True
        return torch.from_numpy(x), torch.from_numpy(h), torch.from_numpy(ht), torch.from_numpy(mask)


def loss_fn(head, W, Wsub, x, h, ht, mask, mse_weight: float):
    """KL(trunk || head) over the token subset, plus MSE of the head's normed hidden row."""
    hs = head(F.embedding(x, W), h)
    m = mask.reshape(-1)
    hs, ht = hs.reshape(-1, hs.shape[-1])[m], ht.reshape(-1, ht.shape[-1])[m]
    with torch.no_grad():
        tlogp = torch.log_softmax(ht @ Wsub.T, dim=-1)
    slogp = torch.log_softmax(hs @ Wsub.T, dim=-1)
    kl = (tlogp.exp() * (tlogp - slogp)).sum(-1).mean()
    mse = (hs - ht).pow(2).mean() / ht.pow(2).mean()
    with torch.no_grad():
        agree = (slogp.argmax(-1) == tlogp.argmax(-1)).float().mean()
    return kl + mse_weight * mse, kl.detach(), agree


def vocab_subset(tokens: np.ndarray, n_vocab: int, size: int) -> tuple[torch.Tensor, float]:
    """The `size` most frequent token ids of the training text (sorted) and their coverage."""
    counts = np.bincount(tokens, minlength=n_vocab)
    sub = np.sort(np.argsort(-counts, kind="stable")[:size])
    return torch.from_numpy(sub), float(counts[sub].sum() / counts.sum())


def fit(
    head,
    train: Rows,
    held: Rows,
    W,
    Wsub,
    *,
    steps: int,
    lr: float,
    batch: int,
    seq: int,
    mse_weight: float,
    seed: int,
    step0: int = 0,
) -> list[dict]:
    """AdamW with warm-up and cosine decay; the curve: train figures every 10 steps, held-out
    every 50 (steps numbered from step0, so two stages make one curve)."""
    seed_all(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))
    )
    eval_batches = [held.batch(np.random.default_rng(seed + 1 + i), batch, seq) for i in range(4)]
    curve = []
    head.train()
    t0 = time.time()
    for step in range(steps + 1):
        if step % 50 == 0 or step == steps:
            head.eval()
            with torch.no_grad():
                ev = [loss_fn(head, W, Wsub, *b, mse_weight) for b in eval_batches]  # type: ignore[call-arg]
            head.train()
            ekl = float(np.mean([e[1] for e in ev]))
            eacc = float(np.mean([e[2] for e in ev]))
            curve.append(
                {
                    "step": step0 + step,
                    "held_kl": round(ekl, 5),
                    "held_top1": round(eacc, 5),
                    "seconds": round(time.time() - t0, 1),
                }
            )
            print(
                f"step {step0 + step}: held-out KL {ekl:.4f}, top-1 agreement {eacc:.4f} ({time.time() - t0:.0f} s)",
                flush=True,
            )
        if step == steps:
            break
        loss, kl, acc = loss_fn(head, W, Wsub, *train.batch(rng, batch, seq), mse_weight)  # type: ignore[call-arg]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 10 == 0:
            curve.append(
                {
                    "step": step0 + step,
                    "train_loss": round(float(loss), 5),
                    "train_kl": round(float(kl), 5),
                    "train_top1": round(float(acc), 5),
                    "seconds": round(time.time() - t0, 1),
                }
            )
            print(
                f"  step {step0 + step}: train KL {float(kl):.4f}, top-1 {float(acc):.3f} ({time.time() - t0:.0f} s)",
                flush=True,
            )
    head.eval()
    return curve


def write_curve(path: Path, curve: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        keys = ["stage", "step", "train_loss", "train_kl", "train_top1", "held_kl", "held_top1", "seconds"]
        wr = csv.DictWriter(f, fieldnames=keys)
        wr.writeheader()
        wr.writerows(curve)


def rows_for(teacher: Path, texts: Path, out: Path, code_tokens: int, seed: int, n_threads: int | None) -> Path:
    if not out.exists():
        import pymtp

        print(f"extracting the trunk's hidden rows with llama.cpp -> {out.name}", flush=True)
        with pymtp.Model(teacher, mtp=False) as m:
            wins = windows(m, corpus.read_texts(texts))
        extract_rows(teacher, wins, out, code_tokens, seed, n_threads)
    return out


def train_stage(
    stage: int, head, rows: Path, path: Path, W, args, steps: int, lr: float, step0: int, meta: dict
) -> list[dict]:
    """One stage of training on one rows file; writes the head and its curve to path."""
    train, held = Rows(rows, False), Rows(rows, True)
    sub, coverage = vocab_subset(train.tokens, W.shape[0], args.vocab_subset)
    print(
        f"stage {stage}: windows train {len(train.spans)}, held-out {len(held.spans)}; "
        f"KL over {len(sub)} tokens, {coverage:.4f} of training tokens",
        flush=True,
    )
    t0 = time.time()
    curve = fit(
        head,
        train,
        held,
        W,
        W[sub].contiguous(),
        steps=steps,
        lr=lr,
        batch=args.batch,
        seq=args.seq,
        mse_weight=args.mse_weight,
        seed=args.seed + stage - 1,
        step0=step0,
    )
    for r in curve:
        r["stage"] = stage
    write_head_gguf(head, path)
    if path != Path(args.out):  # a stage's cache; the final curve goes to --records
        write_curve(path.with_suffix(".loss.csv"), curve)
    meta[f"stage{stage}"] = {
        "train_windows": len(train.spans),
        "train_tokens": int(sum(e - s for s, e in train.spans)),
        "vocab_subset_coverage": round(coverage, 5),
        "seconds": round(time.time() - t0, 1),
        "final": curve[-1],
    }
    return curve


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m pymtp.train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--work", default="build/pymtp-head")
    ap.add_argument("--out", default=str(MODELS_DIR / HEAD_FILE))
    ap.add_argument("--records", default=str(RECORDS_DIR), help="where the loss curve and the run record go")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--vocab-subset", type=int, default=8192)
    ap.add_argument("--mse-weight", type=float, default=0.1)
    ap.add_argument("--code-tokens", type=int, default=400_000)
    ap.add_argument("--n-chat", type=int, default=220)
    ap.add_argument("--n-prose", type=int, default=80)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument(
        "--stage2-steps",
        type=int,
        default=900,
        help="stage 2: more steps on a larger body of the trunk's own text (0: stage 1 only)",
    )
    ap.add_argument("--stage2-lr", type=float, default=5e-4)
    ap.add_argument("--stage2-code-tokens", type=int, default=100_000)
    ap.add_argument("--stage2-n-code", type=int, default=400, help="stdlib openings the trunk continues")
    ap.add_argument("--stage2-gen-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument(
        "--llama-threads",
        type=int,
        default=0,
        help="llama.cpp threads for the hidden rows (0: one per core; 1 holds up on a busy machine)",
    )
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    cfg = HeadConfig()
    t_start = time.time()
    llama_threads = args.llama_threads or None
    # the recipe owns the machine: generation decodes on every core unless told otherwise
    os.environ.setdefault("PYMTP_THREADS", str(args.llama_threads or os.cpu_count() or 1))

    teacher, head = make_teacher(work, cfg, args.seed)
    import pymtp
    from pymtp import trunk

    W = torch.from_numpy(gguf_weights(teacher, {"token_embd.weight"})["token_embd.weight"])
    meta = {
        "args": vars(args),
        "config": cfg.to_dict(),
        "parameters": num_params(head),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    curve = []
    # stage 1: the head from the trunk's last block, on stdlib code and a few hundred trunk texts
    stage1 = work / "stage1" / HEAD_FILE if args.stage2_steps else out
    if stage1 != out and stage1.exists() and stage1.with_suffix(".loss.csv").exists():
        head = read_head_gguf(stage1, cfg)  # cached like the other steps
        with open(stage1.with_suffix(".loss.csv")) as f:
            curve = [
                {k: int(v) if k == "step" else float(v) for k, v in r.items() if v not in ("", None)} | {"stage": 1}
                for r in csv.DictReader(f)
            ]
        record = stage1.with_suffix(".train.json")
        if record.exists():
            meta["stage1"] = json.loads(record.read_text())
        print(f"stage 1: {stage1} (cached)", flush=True)
    else:
        texts_path = work / "texts.jsonl"
        if not texts_path.exists():
            print("generating chat and prose with the trunk", flush=True)
            with pymtp.Model(trunk.trunk_path(), mtp=False) as m:
                corpus.generate_texts(
                    m, texts_path, n_chat=args.n_chat, n_prose=args.n_prose, max_tokens=args.gen_tokens, seed=args.seed
                )
        rows = rows_for(teacher, texts_path, work / "rows.npz", args.code_tokens, args.seed, llama_threads)
        curve = train_stage(1, head, rows, stage1, W, args, args.steps, args.lr, 0, meta)
        stage1.with_suffix(".train.json").write_text(json.dumps(meta, indent=1) + "\n")
    if args.stage2_steps:
        # stage 2: ~1,000 more trunk texts (every instruction and opening, stdlib continuations),
        # generated 8 at a time; greedy ones among them, the way the head serves
        texts2 = work / "texts2.jsonl"
        if not texts2.exists():
            print("generating more text with the trunk, 8 prompts at a time", flush=True)
            with pymtp.Model(teacher, mtp=False) as m:  # the F16 form the default serves
                corpus.generate_many(
                    m, texts2, n_code=args.stage2_n_code, max_tokens=args.stage2_gen_tokens, seed=args.seed + 1
                )
        rows2 = rows_for(teacher, texts2, work / "rows2.npz", args.stage2_code_tokens, args.seed + 1, llama_threads)
        curve += train_stage(2, head, rows2, out, W, args, args.stage2_steps, args.stage2_lr, args.steps, meta)
    curve_path = record_path(out, ".loss.csv", args.records)
    curve_path.parent.mkdir(parents=True, exist_ok=True)
    write_curve(curve_path, curve)
    meta["total_seconds"] = round(time.time() - t_start, 1)
    record_path(out, ".train.json", args.records).write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB), {curve_path}", flush=True)
