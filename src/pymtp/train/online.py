"""#30's training run on a GPU: the trunk runs there, in PyTorch, as text writer and teacher.

    python -m pymtp.train.online pack DIR                  # here: prompts and documents, tokenized
    python -m pymtp.train.online run DIR --trunk GGUF --device cuda --train-minutes 5 --out OUT

Why: the CPU pipeline (selfdistill.py) extracts the teacher's rows through llama.cpp, about
1.3 KB per token, so a few million tokens are gigabytes to carry to a GPU machine, and
writing trunk text on 2 cores is slow. On a GPU both are seconds of work, so ``pack`` keeps
only token ids (the prompts to continue and the documents to learn from, a few MB) and
``run`` does the rest there:

1. the trunk (trunk_torch.Trunk, from the wheel's GGUF) writes continuations of the packed
   prompts (greedy, or sampled at T=0.7 / top-p 0.9 with --samples seeds each), within
   --gen-seconds;
2. it runs over every document (packed ones plus those texts) and keeps, on the device, what
   teacher.py keeps: hidden rows and the top-k next-token log-probs;
3. selfdistill.train trains the head on those rows with crops gathered on the device
   (crops.DeviceCrops), for --train-minutes or --steps, and writes the head (F16 GGUF), its
   loss curve and a JSON record of the run into --out.

``run`` needs torch and numpy, and gguf to read the trunk and write the head; not pymtp's
native library (tools/train_on_gpu.py starts it on a machine without one).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import selfdistill, teacher, teacher_text
from .crops import DeviceCrops, parse_weights

MAX_TEXT = teacher_text.WINDOW  # a document's tokens at most, prompt included


# ---- pack: here, with pymtp and the tokenizer ------------------------------------------------


def pack(
    out: Path,
    *,
    n_code: int,
    code_rounds: int,
    code_tokens: int,
    docs_tokens: int,
    draft_vocab: int,
    seed: int,
    work: Path,
) -> dict:
    """Write out/jobs.json (prompts to continue), out/docs.npz (documents: the trunk texts
    already written in work, human code and prose) and out/vocab.npy (the draft vocabulary)."""
    import pymtp
    from pymtp import draft_vocab as dv

    out.mkdir(parents=True, exist_ok=True)
    with pymtp.load(n_ctx=2048) as session:
        m = session.model
        jobs = teacher_text.generation_jobs(m, n_code=n_code, seed=seed)
        jobs += _more_code_jobs(m, jobs, n_code=n_code, rounds=code_rounds, seed=seed)
        text = work / "trunk-text.jsonl"
        docs = teacher_text.trunk_documents(text) if text.exists() else []
        docs += teacher_text.human_documents(m, code_tokens=code_tokens, docs_tokens=docs_tokens, seed=seed)
        np.save(out / "vocab.npy", dv.frequent_tokens(m, draft_vocab))
    written = {d["id"] for d in docs}
    # greedy texts the CPU already wrote (held-out ones included) are kept as llama.cpp wrote them
    jobs = [j for j in jobs if j["temperature"] > 0 or j["id"] not in written]
    (out / "jobs.json").write_text(json.dumps(jobs))
    lens = np.asarray([len(d["tokens"]) for d in docs], np.int64)
    np.savez_compressed(
        out / "docs.npz",
        tokens=np.concatenate([np.asarray(d["tokens"], np.uint16) for d in docs]),
        offsets=np.concatenate([[0], np.cumsum(lens)]),
        first=np.asarray([d["first"] for d in docs], np.int32),
        domain=np.asarray([d["domain"] for d in docs]),
        held_out=np.asarray([d["held_out"] for d in docs]),
        doc_id=np.asarray([d["id"] for d in docs]),
    )
    return {"jobs": len(jobs), "documents": len(docs), "tokens": int(lens.sum())}


def _more_code_jobs(model, jobs: list[dict], *, n_code: int, rounds: int, seed: int) -> list[dict]:
    """Code openings cut at other places of the same files (corpus.code_prompts with other
    seeds), training files only, half greedy, half sampled."""
    from . import corpus

    seen = {tuple(j["prompt"]) for j in jobs}
    out: list[dict] = []
    for r in range(1, rounds + 1):
        for i, (held, toks) in enumerate(corpus.code_prompts(model, n=n_code, seed=seed + 1000 * r)):
            if held or tuple(toks) in seen:
                continue
            seen.add(tuple(toks))
            temp = 0.0 if len(out) % 2 else teacher_text.SAMPLED["temperature"]
            out.append(
                {"id": f"codegen-r{r}:{i}", "domain": "codegen", "held_out": False, "prompt": toks, "temperature": temp}
            )
    return out


def _read_docs(path: Path) -> list[dict]:
    with np.load(path) as z:
        offs, toks = z["offsets"], z["tokens"].astype(np.int64)
        return [
            {
                "id": str(z["doc_id"][i]),
                "domain": str(z["domain"][i]),
                "held_out": bool(z["held_out"][i]),
                "first": int(z["first"][i]),
                "tokens": toks[offs[i] : offs[i + 1]].tolist(),
            }
            for i in range(len(offs) - 1)
        ]


# ---- run: on the training device -----------------------------------------------------------


def write_texts(
    trunk, jobs: list[dict], *, samples: int, max_tokens: int, batch: int, seconds: float, seed: int, device, log=print
):
    """Trunk continuations of the jobs as documents: a greedy job once, a sampled one `samples`
    times (its own seed each); batches of similar prompt length until `seconds` run out."""
    import random

    from .trunk_torch import generate

    todo = []
    for j in jobs:
        for k in range(samples if j["temperature"] > 0 else 1):
            todo.append(j | {"id": f"gpu:{j['id']}#{k}"})
    random.Random(seed).shuffle(todo)  # every domain in every batch: a cut-short run keeps the mix
    todo.sort(key=lambda j: not j["held_out"])  # held-out first: always written
    t0, docs, n_tok = time.time(), [], 0
    for s in range(0, len(todo), batch):
        if time.time() - t0 > seconds:
            log(f"  text budget spent: {len(todo) - s} of {len(todo)} texts not written")
            break
        group = todo[s : s + batch]
        outs = generate(
            trunk,
            [j["prompt"] for j in group],
            [float(j["temperature"]) for j in group],
            max_tokens=max_tokens,
            seed=seed + s,
            device=device,
        )
        for j, comp in zip(group, outs):
            toks = (j["prompt"] + comp)[:MAX_TEXT]
            if len(toks) - len(j["prompt"]) >= 8:
                docs.append(
                    {k: j[k] for k in ("id", "domain", "held_out")} | {"tokens": toks, "first": len(j["prompt"])}
                )
                n_tok += len(comp)
    seconds_used = time.time() - t0
    log(f"trunk text: {len(docs)} texts, {n_tok} new tokens in {seconds_used:.0f} s")
    return docs, {"texts": len(docs), "new_tokens": n_tok, "seconds": round(seconds_used, 1)}


def device_documents(trunk, docs: list[dict], *, top_k: int, device) -> tuple[dict[str, Any], dict]:
    """The teacher's rows for every document, kept on the device, as teacher.Documents split by
    held_out (plus "held_code": held-out human code alone)."""
    import torch

    from .trunk_torch import teacher_rows

    t0 = time.time()
    order, hidden, ids, logp = teacher_rows(trunk, [d["tokens"] for d in docs], top_k=top_k, device=device)
    docs = [docs[i] for i in order]
    lens = np.asarray([len(d["tokens"]) for d in docs], np.int64)
    offs = np.concatenate([[0], np.cumsum(lens)])
    tokens = torch.as_tensor(np.concatenate([d["tokens"] for d in docs]), device=device)

    def split(keep) -> teacher.Documents:
        sel = [i for i, d in enumerate(docs) if keep(d)]
        rows = torch.as_tensor(np.concatenate([np.arange(offs[i], offs[i + 1]) for i in sel]), device=device)
        return teacher.Documents(
            tokens=tokens[rows],  # type: ignore[arg-type]  # device tensors: crops.DeviceCrops reads them
            hidden=hidden[rows],  # type: ignore[arg-type]
            topk_ids=ids[rows],  # type: ignore[arg-type]
            topk_logp=logp[rows],  # type: ignore[arg-type]
            offsets=np.concatenate([[0], np.cumsum(lens[sel])]),
            first=np.asarray([docs[i]["first"] for i in sel], np.int64),
            domain=np.asarray([docs[i]["domain"] for i in sel]),
        )

    out = {
        "train": split(lambda d: not d["held_out"]),
        "held": split(lambda d: d["held_out"]),
        "held_code": split(lambda d: d["held_out"] and d["domain"] == "code"),
    }
    per: dict[str, int] = {}
    for d, n in zip(docs, lens):
        key = f"{d['domain']}{'-held' if d['held_out'] else ''}"
        per[key] = per.get(key, 0) + int(n)
    return out, {"tokens": int(lens.sum()), "seconds": round(time.time() - t0, 1), "tokens_by_domain": per}


def run(args, log=print) -> dict:
    import torch

    from .trunk_torch import Trunk

    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True  # the teacher's matrices: see trunk_torch
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    trunk = Trunk.from_gguf(args.trunk, dev)
    record: dict[str, Any] = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    record["load_seconds"] = round(time.time() - t0, 1)
    jobs = json.loads((args.pack_dir / "jobs.json").read_text())
    docs = _read_docs(args.pack_dir / "docs.npz")
    new, record["generation"] = write_texts(
        trunk,
        jobs,
        samples=args.samples,
        max_tokens=args.gen_tokens,
        batch=args.gen_batch,
        seconds=args.gen_seconds,
        seed=args.seed,
        device=dev,
        log=log,
    )
    split, record["extraction"] = device_documents(trunk, docs + new, top_k=args.top_k, device=dev)
    log(f"teacher rows: {record['extraction']}")
    if args.finish_by:  # a machine lent for a fixed time: training ends a margin before it
        left = (args.finish_by - time.time() - 45) / 60
        args.train_minutes = max(0.5, min(args.train_minutes or left, left))
        log(f"training for {args.train_minutes:.2f} minutes")
    embed = trunk.embed.float().cpu().numpy()
    del trunk
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    data = selfdistill.TrainData(
        embed=embed,
        vocab=np.load(args.pack_dir / "vocab.npy").astype(np.int32),
        crops=DeviceCrops(split["train"], args.seq, parse_weights(args.domain_weight)),
        held=DeviceCrops(split["held"], args.seq),
        held_code=DeviceCrops(split["held_code"], args.seq) if args.eval_code_batches else None,
    )
    record["train"] = selfdistill.train(args, out, log, data)
    record["total_seconds"] = round(time.time() - t0, 1)
    record["torch"] = torch.__version__
    record["device_name"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    if "head" in record["train"]:
        path = Path(record["train"]["head"])
        path.with_suffix(".train.json").write_text(json.dumps(record, indent=1) + "\n")
        log(f"wrote {path} and its .loss.csv / .train.json")
    return record


def parser():
    ap = selfdistill.parser()
    ap.description = __doc__.split("\n\n")[0] if __doc__ else None
    ap.add_argument("mode", choices=("pack", "run"), help="pack: here, with pymtp; run: on the training device")
    ap.add_argument("pack_dir", type=Path, help="the pack's folder (pack writes it, run reads it)")
    ap.add_argument("--trunk", type=Path, help="run: the trunk's GGUF (pymtp.trunk.trunk_path(), the wheel's)")
    ap.add_argument("--out", type=Path, default=Path("online-run"), help="run: where the head and its records go")
    ap.add_argument(
        "--code-rounds", type=int, default=2, help="pack: more code openings, from other places in the files"
    )
    ap.add_argument("--samples", type=int, default=4, help="run: texts per sampled prompt (one seed each)")
    ap.add_argument("--gen-seconds", type=float, default=60.0, help="run: time for new trunk text")
    ap.add_argument("--gen-batch", type=int, default=512, help="run: texts decoded together")
    ap.add_argument("--finish-by", type=float, default=0.0, help="run: end training by this time.time(), less a margin")
    return ap


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    if args.mode == "pack":
        work = args.work or selfdistill.default_work()
        figs = pack(
            args.pack_dir,
            n_code=args.n_code,
            code_rounds=args.code_rounds,
            code_tokens=args.code_tokens,
            docs_tokens=args.docs_tokens,
            draft_vocab=args.draft_vocab,
            seed=args.seed,
            work=work,
        )
        print(json.dumps(figs), flush=True)
        return
    if args.trunk is None:
        raise SystemExit("run needs --trunk (the trunk's GGUF)")
    rec = run(args)
    print(json.dumps({k: rec[k] for k in ("generation", "extraction", "total_seconds")}), flush=True)


if __name__ == "__main__":
    main()
