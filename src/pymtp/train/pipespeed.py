"""Throughput of the corpus stages in tokens per CPU-second, variants interleaved (medians):

    python -m pymtp.train.pipespeed extract [--rounds 3] [--tokens 5000]
    python -m pymtp.train.pipespeed generate [--rounds 2] [--n-seq 16 32 64]

``extract``: teacher.extract on the same training documents (trunk text and human code from
the work folder), once per round with each top-k selection: over whole rows (the form used
before) and blocked (teacher.top_k_logprobs). It also checks that both wrote the same
shards: the same log-probs and the same ids except the order of tied values.

``generate``: teacher_text.generate of the same training prompts (max 160 tokens) through
pymtp.Batch with each number of streams.

CPU time is the process's (every thread), so the figure is what idle cores would give on a
shared machine. Run it alone: ``/work/tools/bench-quiet python -m pymtp.train.pipespeed ...``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from . import teacher, teacher_text


def _extract_docs(work: Path, model, tokens: int) -> list[dict]:
    """Training documents, half trunk text and half human code, about `tokens` in all."""
    trunk = [d for d in teacher_text.trunk_documents(work / "trunk-text.jsonl") if not d["held_out"]]
    code = teacher_text.human_documents(model, code_tokens=tokens, docs_tokens=0, seed=1, splits=(False,))
    out, n = [], 0
    for src in (trunk, code):
        m = 0
        for d in src:
            if m >= tokens // 2:
                break
            out.append(d)
            m += len(d["tokens"])
        n += m
    return out


def _same_shards(a: Path, b: Path) -> dict:
    za, zb = np.load(a / "shard-00000.npz"), np.load(b / "shard-00000.npz")
    la, lb = za["topk_logp"], zb["topk_logp"]
    ia, ib = za["topk_ids"], zb["topk_ids"]
    tie = np.zeros(la.shape, bool)
    eq = la[:, 1:] == la[:, :-1]  # float16 ties; the selections agree on the float32 order
    tie[:, 1:] |= eq
    tie[:, :-1] |= eq
    return {
        "positions": int(la.shape[0]),
        "logp_equal": bool((la == lb).all()),
        "ids_equal_outside_float16_ties": bool((ia[~tie] == ib[~tie]).all()),
        "ids_equal": float((ia == ib).mean()),
        "hidden_equal": bool((za["hidden"] == zb["hidden"]).all()),
    }


def run_extract(args, work: Path) -> dict:
    import pymtp
    from pymtp import default_model

    variants = {"whole rows (before)": teacher.top_k_logprobs_whole_rows, "blocked": teacher.top_k_logprobs}
    tp = default_model.resolve(None)
    with pymtp.Model(tp) as m:
        docs = _extract_docs(work, m, args.tokens)
    n_tok = sum(len(d["tokens"]) for d in docs)
    rates: dict[str, list[float]] = {k: [] for k in variants}
    check = None
    with tempfile.TemporaryDirectory() as td:
        for r in range(args.rounds):
            outs: dict[str, Path] = {}
            for name, select in variants.items():
                out = Path(td) / f"{r}-{len(outs)}"
                c0 = time.process_time()
                teacher.extract(
                    tp,
                    docs,
                    out,
                    top_k=32,
                    shard_tokens=10**9,
                    n_threads=args.threads,
                    select=select,
                    log=lambda *_: None,
                )
                rates[name].append(n_tok / (time.process_time() - c0))
                outs[name] = out
                print(f"  round {r} {name}: {rates[name][-1]:.0f} tok per CPU-s", flush=True)
            if check is None:
                check = _same_shards(*outs.values())
    return {"tokens_per_round": n_tok, "documents": len(docs), "same_output": check} | _medians(rates)


def run_generate(args, work: Path) -> dict:
    import pymtp

    rates: dict[str, list[float]] = {f"n_seq {n}": [] for n in args.n_seq}
    with pymtp.load() as s:
        jobs = [j for j in teacher_text.generation_jobs(s.model, n_code=1000, seed=1) if not j["held_out"]]
        with tempfile.TemporaryDirectory() as td:
            for r in range(args.rounds):
                for n in args.n_seq:
                    # as many texts as the most streams, so every variant writes the same texts
                    batch = jobs[r * max(args.n_seq) : (r + 1) * max(args.n_seq)]
                    out = Path(td) / f"{r}-{n}.jsonl"
                    c0 = time.process_time()
                    teacher_text.generate(s, out, batch, max_tokens=160, n_seq=n, seed=1, log=lambda *_: None)
                    c = time.process_time() - c0
                    toks = sum(len(t["completion"]) for t in teacher_text.read_jsonl(out))
                    rates[f"n_seq {n}"].append(toks / c)
                    print(f"  round {r} n_seq {n}: {toks} tokens, {toks / c:.0f} tok per CPU-s", flush=True)
    return _medians(rates)


def _medians(rates: dict[str, list[float]]) -> dict:
    return {
        "tokens_per_cpu_s": {k: round(statistics.median(v), 1) for k, v in rates.items()},
        "rounds": {k: [round(x, 1) for x in v] for k, v in rates.items()},
    }


def main(argv=None) -> None:
    from .selfdistill import default_work

    ap = argparse.ArgumentParser(prog="python -m pymtp.train.pipespeed")
    ap.add_argument("stage", choices=("extract", "generate"))
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=5000, help="extract: tokens per round and variant")
    ap.add_argument("--threads", type=int, default=2, help="extract: llama.cpp threads")
    ap.add_argument("--n-seq", type=int, nargs="+", default=[16, 32, 64], help="generate: streams per Batch")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    work = args.work or default_work()
    res = (run_extract if args.stage == "extract" else run_generate)(args, work)
    res = {"stage": args.stage, "args": {k: str(v) for k, v in vars(args).items()}} | res
    print(json.dumps(res, indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
