"""Soft-target, multi-step self-distillation of the default model's NextN head (issue #30).

    python -m pymtp.train.selfdistill                      # every stage, cached and resumable
    python -m pymtp.train.selfdistill --device cuda        # the same run on a GPU (training stage)
    python -m pymtp.train.evaluate_head --head WORK/RUN/smollm2-135m-nextn.gguf

Stages, each cached in --work (default: pymtp's cache, ``train/smollm2-135m``):

1. ``trunk-text.jsonl``: chat answers, prose and code continuations the trunk writes through
   pymtp.Batch (teacher_text.py), within --gen-minutes (a rerun writes more);
2. ``teacher/``: the trunk's hidden rows and top-k next-token log-probs for those texts and
   for human code and prose (teacher.py), in shards; ``vocab.npy`` (the draft vocabulary the
   loss normalises over, pymtp.draft_vocab's) and ``embed.npy`` (the trunk's tied
   embedding / output matrix) beside them, so that training needs neither llama.cpp nor the
   trunk file: copy the work folder to a GPU machine and run the same command there;
3. ``RUN/``: training (multistep.py) from --init (the shipped head), checkpointed every
   --ckpt-every steps (``ckpt.pt``; a rerun resumes), then the head (F16 GGUF), its loss
   curve and a JSON record of the run.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import teacher, teacher_text
from .crops import Crops, parse_weights

HEAD_FILE = "smollm2-135m-nextn.gguf"
SHIPPED = Path(__file__).resolve().parents[1] / "models" / HEAD_FILE


def default_work() -> Path:
    from pymtp.cache import cache_dir

    return cache_dir("train") / "smollm2-135m"


# ---- stages 1 and 2: the corpus and the teacher (llama.cpp, CPU) --------------------------


def prepare(args, work: Path, log=print) -> dict:
    """Trunk text, teacher shards, draft vocabulary and embeddings; returns timing figures."""
    import pymtp
    from pymtp import default_model, draft_vocab

    from .head import gguf_weights

    figures = {}
    # the teacher's rows are the trunk's; an existing teacher/ folder was extracted with one
    # file (its manifest names it), and the default model's file changes with its shipped head
    teacher_path = args.teacher or default_model.resolve(None)
    text = work / "trunk-text.jsonl"
    with pymtp.load(n_ctx=2048) as session:
        m = session.model
        if args.gen_minutes > 0:
            t0, c0 = time.time(), time.process_time()
            n0 = _generated_tokens(text)
            jobs = teacher_text.generation_jobs(m, n_code=args.n_code, seed=args.seed)
            teacher_text.generate(
                session,
                text,
                jobs,
                max_tokens=args.gen_tokens,
                n_seq=args.gen_seqs,
                seed=args.seed,
                deadline=t0 + 60 * args.gen_minutes,
                log=log,
            )
            figures["generation"] = {
                "seconds": round(time.time() - t0, 1),
                "cpu_seconds": round(time.process_time() - c0, 1),
                "new_tokens": _generated_tokens(text) - n0,
            }
        docs = teacher_text.trunk_documents(text) if text.exists() else []
        # held-out trunk texts only feed the training curve (evaluate_head measures the rest)
        kept: list = []
        per: dict = {}
        for d in docs:
            if d["held_out"]:
                per[d["domain"]] = per.get(d["domain"], 0) + 1
                if per[d["domain"]] > args.held_trunk_docs:
                    continue
            kept.append(d)
        docs = kept
        docs += teacher_text.human_documents(
            m, code_tokens=args.code_tokens, docs_tokens=args.docs_tokens, seed=args.seed
        )
        vocab = draft_vocab.frequent_tokens(m, args.draft_vocab)
        np.save(work / "vocab.npy", vocab)
    if not (work / "embed.npy").exists():
        W = gguf_weights(teacher_path, {"token_embd.weight"})["token_embd.weight"]
        np.save(work / "embed.npy", W.astype(np.float16))
    t0, c0 = time.time(), time.process_time()
    man = teacher.extract(
        teacher_path, docs, work / "teacher", top_k=args.top_k, n_threads=args.llama_threads or None, log=log
    )
    figures["extraction"] = {
        "seconds": round(time.time() - t0, 1),
        "cpu_seconds": round(time.process_time() - c0, 1),
        "tokens_total": man["tokens"],
        "seconds_total": man["seconds"],
        "cpu_seconds_total": man.get("cpu_seconds", 0.0),
    }
    return figures


def _generated_tokens(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(len(t["completion"]) for t in teacher_text.read_jsonl(path))


# ---- stage 3: training (torch, CPU or GPU) --------------------------------------------------


@dataclass
class TrainData:
    """What a training run reads: the tied output matrix (numpy), the draft vocabulary, and
    crops of the training and held-out documents (held_code: held-out human code alone;
    held_trunk: held-out trunk-written text alone)."""

    embed: np.ndarray
    vocab: np.ndarray
    crops: Crops
    held: Crops
    held_code: Crops | None
    eval_shards: int | None = None
    held_trunk: Crops | None = None


def load_data(args, work: Path, eval_shards: int | None) -> TrainData:
    """The work folder's data (prepare()'s): the held-out curve's shards are those of the
    run's start (eval_shards), so that shards extracted meanwhile (a resumed run trains on
    them) leave the curve comparable along the run."""
    n_eval = eval_shards or len(json.loads((work / "teacher" / teacher.MANIFEST).read_text())["shards"])
    tr, he = teacher.load(work / "teacher", False), teacher.load(work / "teacher", True, n_shards=n_eval)
    held_domains = {str(x) for x in he.domain}

    def held_alone(domains: set[str], n_batches: int) -> Crops | None:
        """The held-out shards of these domains alone (None unless measured and present)."""
        if not n_batches or not domains & held_domains:
            return None
        return Crops(teacher.load(work / "teacher", True, domains=domains, n_shards=n_eval), args.seq)

    held_code = held_alone({"code"}, args.eval_code_batches)
    held_trunk = held_alone(set(teacher_text.TRUNK_DOMAINS), args.eval_trunk_batches)
    return TrainData(
        embed=np.load(work / "embed.npy"),
        vocab=np.load(work / "vocab.npy").astype(np.int32),
        crops=Crops(tr, args.seq, parse_weights(args.domain_weight)),
        held=Crops(he, args.seq),
        held_code=held_code,
        eval_shards=n_eval,
        held_trunk=held_trunk,
    )


def train(args, work: Path, log=print, data: TrainData | None = None) -> dict:
    """Train the head on data (default: the work folder's) into work/args.run; checkpointed,
    resumable. With args.train_minutes the run stops at that time or at args.steps, and the
    learning-rate schedule follows whichever comes first."""
    import torch

    from .head import HeadConfig, read_head_gguf, write_head_gguf
    from .multistep import DraftVocab

    dev = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    run = work / args.run
    run.mkdir(parents=True, exist_ok=True)
    cfg = HeadConfig()
    ckpt = run / "ckpt.pt"
    st = torch.load(ckpt, map_location=dev, weights_only=False) if ckpt.exists() else None
    data = data or load_data(args, work, (st or {}).get("eval_shards"))
    W = torch.from_numpy(data.embed.astype(np.float32)).to(dev)
    # a run keeps the draft vocabulary it started with: prepare() rewrites vocab.npy, and a
    # resumed chunk once picked up a new one halfway through run6 (loss and curve both changed)
    vocab_ids = data.vocab
    if st is not None and "vocab" in st:
        if not np.array_equal(st["vocab"], vocab_ids):
            log(f"vocab.npy differs from the run's draft vocabulary: keeping the run's ({len(st['vocab'])} ids)")
        vocab_ids = np.asarray(st["vocab"], np.int32)
    vocab = DraftVocab(vocab_ids, cfg.n_vocab, dev)
    crops, held, n_eval_shards = data.crops, data.held, data.eval_shards
    log(
        f"training on {crops.d.n_tokens} tokens ({len(crops.ok)} documents), held-out {held.d.n_tokens}; "
        f"draft vocabulary {len(vocab.ids)}; device {dev}, torch threads {torch.get_num_threads()}"
    )
    head = read_head_gguf(args.init, cfg).to(dev)
    head.train()
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    budget = 60 * getattr(args, "train_minutes", 0.0)
    step, curve, seconds, cpu, tokens_seen = 0, [], 0.0, 0.0, 0

    def progress(step: int) -> float:
        """How far the run is, 0..1: by steps, or by time when a time budget ends it sooner."""
        return min(1.0, max(step / args.steps, seconds / budget if budget else 0.0))

    # warm-up over the first 5% (of steps, or of the time budget), then a cosine to zero
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (progress(s) + 1 / args.steps) / 0.05) * 0.5 * (1 + math.cos(math.pi * progress(s)))
    )
    rng = np.random.default_rng(args.seed)
    if st is not None:
        head.load_state_dict(st["head"])
        opt.load_state_dict(st["opt"])
        sched.load_state_dict(st["sched"])
        rng.bit_generator.state = st["rng"]
        torch.set_rng_state(st["torch_rng"])
        step, curve, seconds, cpu = st["step"], st["curve"], st["seconds"], st.get("cpu_seconds", 0.0)
        tokens_seen = st.get("tokens_seen", step * args.batch * args.seq)
        log(f"resumed at step {step}")
    held_sets = held_batches(data, args)

    def evaluate() -> dict:
        return {"step": step, "seconds": round(seconds, 1)} | held_set_figures(head, W, vocab, held_sets, args)

    def save() -> None:
        tmp = ckpt.with_suffix(".tmp")
        torch.save(
            {
                "head": head.state_dict(),
                "opt": opt.state_dict(),
                "sched": sched.state_dict(),
                "rng": rng.bit_generator.state,
                "torch_rng": torch.get_rng_state(),
                "step": step,
                "curve": curve,
                "seconds": seconds,
                "cpu_seconds": cpu,
                "eval_shards": n_eval_shards,
                "tokens_seen": tokens_seen,
                "vocab": vocab_ids,
            },
            tmp,
        )
        tmp.replace(ckpt)

    if step == 0:
        curve.append(evaluate())
        log(_fmt(curve[-1]))
    stop = min(args.steps, args.stop_at or args.steps)
    while step < stop and progress(step) < 1.0:
        t0, c0 = time.time(), time.process_time()
        batch = (crops.packed if args.pack else crops.batch)(rng, args.batch, dev)
        loss, figs = train_step(
            head,
            opt,
            sched,
            W,
            vocab,
            batch,
            args.chain,
            args.feed,
            bf16=args.bf16,
            target_temperature=args.target_temp,
            hard_weight=args.hard_weight,
        )
        step += 1
        tokens_seen += int(batch[4].sum())  # positions holding text (packed rows: nearly all)
        seconds += time.time() - t0
        cpu += time.process_time() - c0
        if step % 10 == 0:
            row = {"step": step, "seconds": round(seconds, 1), "train_loss": round(float(loss.detach()), 5)}
            row |= {f"train_agree{k + 1}": round(f["agree"], 4) for k, f in enumerate(figs)}
            row["train_ce1"] = round(figs[0]["ce"], 4)
            curve.append(row)
            log(_fmt(row))
        done = step == args.steps or progress(step) >= 1.0
        if step % args.eval_every == 0 or done:
            curve.append(evaluate())
            log(_fmt(curve[-1]))
        if step % args.ckpt_every == 0 or step == stop or done:
            save()
    if progress(step) < 1.0:
        log(f"stopped at step {step} of {args.steps}: a rerun resumes from {ckpt}")
        return {"run": str(run), "steps": step, "stopped": True}
    out = run / HEAD_FILE
    write_head_gguf(head.cpu(), out)
    write_curve(out.with_suffix(".loss.csv"), curve)
    return {
        "run": str(run),
        "head": str(out),
        "steps": step,
        "train_seconds": round(seconds, 1),
        "train_cpu_seconds": round(cpu, 1),
        "seconds_per_step": round(seconds / max(step, 1), 3),
        "tokens_seen": tokens_seen,
        "train_tokens": crops.d.n_tokens,
        "held_out_tokens": held.d.n_tokens,
        "first": curve[0],
        "final": [r for r in curve if "held_kl1" in r][-1],
    }


def export_checkpoint(run: Path, out: Path | None = None) -> Path:
    """The head of a run's checkpoint (run/ckpt.pt) as a head GGUF (default:
    run/<run>-step<N>.gguf), without stopping or changing the run: a head to measure while a
    run goes on, or from a run that ran out of time."""
    import torch

    from .head import HeadConfig, NextNHead, write_head_gguf

    st = torch.load(run / "ckpt.pt", map_location="cpu", weights_only=False)
    head = NextNHead(HeadConfig())
    head.load_state_dict(st["head"])
    out = out or run / f"{run.name}-step{st['step']}.gguf"
    write_head_gguf(head.eval(), out)
    return out


def train_step(
    head,
    opt,
    sched,
    W,
    vocab,
    batch,
    chain: int,
    feed: str,
    *,
    bf16: bool,
    target_temperature: float,
    hard_weight: float = 0.0,
):
    """One optimiser step on a batch of crops: the chain loss (under bfloat16 autocast when
    bf16; hard_weight: chain_loss's top-1 term), gradients clipped to norm 1, the schedule
    advanced. Returns (loss, per-step figures)."""
    import torch

    from .multistep import chain_loss

    tokens, hidden, topk_ids, topk_logp, mask = batch[:5]
    seg = batch[5] if len(batch) > 5 else None  # packed rows: each position's document
    with torch.autocast(W.device.type, dtype=torch.bfloat16, enabled=bf16):
        loss, figs = chain_loss(
            head,
            W,
            vocab,
            tokens,
            hidden,
            topk_ids,
            topk_logp,
            mask,
            chain,
            feed=feed,
            target_temperature=target_temperature,
            seg=seg,
            hard_weight=hard_weight,
        )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss, figs


def held_batches(data: TrainData, args) -> dict[str, list]:
    """The curve's fixed held-out batches (seeded by args.seed), by figure prefix: every
    held-out domain (""), held-out human code alone ("code_"), held-out trunk text ("trunk_")."""
    rng = np.random.default_rng(args.seed + 1)
    out = {"": [data.held.batch(rng, args.batch, "cpu") for _ in range(args.eval_batches)]}
    for prefix, crops, n, seed in (
        ("code_", data.held_code, args.eval_code_batches, args.seed + 2),
        ("trunk_", data.held_trunk, args.eval_trunk_batches, args.seed + 3),
    ):
        if crops is not None and n:
            rng = np.random.default_rng(seed)
            out[prefix] = [crops.batch(rng, args.batch, "cpu") for _ in range(n)]
    return out


def held_set_figures(head, W, vocab, sets: dict[str, list], args) -> dict:
    """held_figures of each set: all of them for the whole split, agreement and chain
    agreement for the single groups (prefixed)."""
    row: dict = {}
    for prefix, batches in sets.items():
        figs = held_figures(head, W, vocab, batches, args.chain, args.feed)
        row |= {prefix + k: v for k, v in figs.items() if not prefix or k.startswith(("held_agree", "held_chain"))}
    return row


def held_figures(head, W, vocab, batches: list, chain: int, feed: str) -> dict:
    """Held-out KL, agreement and chain agreement per step over fixed batches, in float32
    (whatever precision training runs in), so runs compare on the same figures."""
    import torch

    from .multistep import chain_loss

    was_training = head.training
    head.eval()
    figs = []
    with torch.no_grad():
        for b in batches:
            tokens, hidden, topk_ids, topk_logp, mask = (x.to(W.device) for x in b)
            figs.append(chain_loss(head, W, vocab, tokens, hidden, topk_ids, topk_logp, mask, chain, feed=feed)[1])
    head.train(was_training)
    out = {}
    for k in range(chain):
        rows = sum(f[k]["rows"] for f in figs)
        for key in ("kl", "agree", "chain"):
            out[f"held_{key}{k + 1}"] = round(sum(f[k][key] * f[k]["rows"] for f in figs) / max(rows, 1), 5)
    return out


def _fmt(row: dict) -> str:
    return "  " + ", ".join(f"{k} {v}" for k, v in row.items())


def write_curve(path: Path, curve: list[dict]) -> None:
    keys = sorted({k for r in curve for k in r}, key=lambda k: (k != "step", k != "seconds", k))
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys)
        wr.writeheader()
        wr.writerows(curve)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pymtp.train.selfdistill",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--work", type=Path, default=None, help="the cache folder of every stage")
    ap.add_argument("--run", default="run", help="the training run's folder in --work")
    ap.add_argument("--device", default="cpu", help="torch device of the training stage: cpu, cuda, cuda:1, ...")
    ap.add_argument(
        "--skip-prepare",
        action="store_true",
        help="train on the shards already in --work (a machine without llama.cpp)",
    )
    ap.add_argument("--prepare-only", action="store_true", help="stop after the teacher's shards")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gen-minutes", type=float, default=60, help="time for new trunk text this run (0: none)")
    ap.add_argument("--n-code", type=int, default=400, help="stdlib openings the trunk continues")
    ap.add_argument("--gen-tokens", type=int, default=160)
    ap.add_argument("--gen-seqs", type=int, default=32, help="texts generated together (pymtp.Batch slots)")
    ap.add_argument(
        "--held-trunk-docs",
        type=int,
        default=10,
        help="held-out trunk texts per domain extracted for the training curve",
    )
    ap.add_argument("--code-tokens", type=int, default=300_000, help="human code (stdlib) for training")
    ap.add_argument("--docs-tokens", type=int, default=150_000, help="human prose (package docs) for training")
    ap.add_argument(
        "--teacher",
        type=Path,
        default=None,
        help="the model GGUF whose trunk extraction runs (default: the default model's); "
        "more shards for an existing teacher/ folder need the file its manifest names",
    )
    ap.add_argument("--top-k", type=int, default=32, help="the trunk's next tokens kept per position")
    ap.add_argument("--draft-vocab", type=int, default=4096, help="the loss's vocabulary: SpecConfig.draft_vocab's")
    ap.add_argument("--llama-threads", type=int, default=0)
    ap.add_argument("--init", type=Path, default=SHIPPED, help="the head training starts from")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument(
        "--train-minutes",
        type=float,
        default=0.0,
        help="stop training after this long (0: at --steps); the schedule follows it",
    )
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument(
        "--pack",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fill each training row with several documents (attention and targets kept inside each)",
    )
    ap.add_argument(
        "--domain-weight",
        action="append",
        metavar="DOMAIN=W",
        help="draw this domain's documents W times as often (repeatable; e.g. code=2)",
    )
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--chain", type=int, default=3, help="recursion steps trained (weights 0.6^(k-1))")
    ap.add_argument(
        "--feed",
        choices=("text", "draft"),
        default="text",
        help="step k's input token: the text's (= the draft on accepted chains) or the head's argmax",
    )
    ap.add_argument(
        "--target-temp",
        type=float,
        default=1.0,
        help="the trunk's top-k log-probs divided by this before renormalising (< 1: sharper, toward its argmax)",
    )
    ap.add_argument(
        "--hard-weight",
        type=float,
        default=0.0,
        help="add this weight x the cross-entropy to the trunk's top-1 to each step's KL (0: KL alone)",
    )
    ap.add_argument(
        "--export-checkpoint",
        action="store_true",
        help="write the head of --run's checkpoint as RUN/RUN-stepN.gguf and exit (the run is left as it is)",
    )
    ap.add_argument("--stop-at", type=int, default=0, help="checkpoint and stop at this step (a later run resumes)")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-batches", type=int, default=4)
    ap.add_argument("--eval-code-batches", type=int, default=0, help="held-out human-code batches also measured alone")
    ap.add_argument(
        "--eval-trunk-batches", type=int, default=0, help="held-out trunk-written batches also measured alone"
    )
    ap.add_argument("--ckpt-every", type=int, default=25)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument(
        "--bf16",
        action="store_true",
        help="bfloat16 autocast in training steps (held-out figures stay float32); "
        "weights, optimizer and loss reductions stay float32",
    )
    return ap


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    work = args.work or default_work()
    work.mkdir(parents=True, exist_ok=True)
    if args.export_checkpoint:
        print(f"wrote {export_checkpoint(work / args.run)}", flush=True)
        return
    t0 = time.time()
    record: dict[str, Any] = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    if not args.skip_prepare:
        record["prepare"] = prepare(args, work)
        if args.prepare_only:
            print(json.dumps(record["prepare"]), flush=True)
            return
    record["train"] = train(args, work)
    if record["train"].get("stopped"):
        return
    record["total_seconds"] = round(time.time() - t0, 1)
    import torch

    record["torch"] = torch.__version__
    record["manifest"] = {
        k: v for k, v in json.loads((work / "teacher" / teacher.MANIFEST).read_text()).items() if k != "shards"
    }
    out = Path(record["train"]["head"])
    out.with_suffix(".train.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB) and its .loss.csv / .train.json", flush=True)


if __name__ == "__main__":
    main()
