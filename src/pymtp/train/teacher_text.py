"""The distillation corpus: text the trunk writes (pymtp.Batch) and human text found offline.

Documents are dicts ``{"id", "domain", "held_out", "tokens", "first"}``: ``tokens`` is the
whole token sequence the trunk is run on, ``first`` the first position whose prediction is
counted (a generated text's prompt is context, not a target).

Domains and their held-out splits (by source, so no held-out document shares a source file
or an instruction with a training one):

* ``chat``    trunk answers to ChatML instructions (``corpus.instructions``), 1 in 10 held out
              by a hash of the instruction;
* ``prose``   trunk continuations of prose openings (``corpus.openings``), same rule;
* ``codegen`` trunk continuations of standard-library code openings, held out with their file;
* ``code``    human code: the standard library's sources (``data.split_files``: 1 file in 20);
* ``docs``    human prose: the long descriptions (READMEs) of the installed packages'
              metadata, 1 package in 10 held out by a hash of its name.

Generation is resumable: finished texts are appended to a JSON-lines file as they finish,
and a rerun skips the ids already there.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path
from typing import Any

from . import corpus, data

TRUNK_DOMAINS = ("chat", "prose", "codegen")  # the trunk-written domains; "code" / "docs" are human
WINDOW = 512  # tokens of one document at most (one prefill)
SAMPLED = dict(temperature=0.7, top_p=0.9)


def _held(text: str, mod: int = 10) -> bool:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % mod == 0


def generation_jobs(
    model, *, n_code: int, seed: int, greedy_share: float = 0.5, held_per_domain: int = 40
) -> list[dict]:
    """Every instruction (chat), every opening (prose) and n_code stdlib openings (codegen),
    each with an id, its prompt tokens, a held-out flag and its temperature: held-out items
    are greedy (acceptance is measured on greedy text), a greedy_share of the others too.
    Held-out items come first, held_per_domain of each domain at most (the measurements use
    a dozen or so: more held-out text only delays the training text, as it did on a run that
    spent its time budget on 162 held-out texts)."""
    rng = random.Random(seed)
    jobs = []
    for kind, sources in (("chat", corpus.instructions(seed)), ("prose", corpus.openings(seed))):
        for src in sources:
            jobs.append(
                {
                    "id": f"{kind}:{src}",
                    "domain": kind,
                    "held_out": corpus.held_out(src),
                    "prompt": corpus.prompt_tokens(model, kind, src),
                }
            )
    for i, (held, toks) in enumerate(corpus.code_prompts(model, n=n_code, seed=seed)):
        jobs.append(
            {
                "id": f"codegen:{i}:{hashlib.sha256(str(toks).encode()).hexdigest()[:12]}",
                "domain": "codegen",
                "held_out": held,
                "prompt": list(toks),
            }
        )
    rng.shuffle(jobs)
    jobs.sort(key=lambda j: not j["held_out"])  # held-out texts first: a cut-short run can be measured
    per: dict[str, int] = {}
    kept = []
    for j in jobs:
        if j["held_out"]:
            domain = str(j["domain"])
            per[domain] = per.get(domain, 0) + 1
            if per[domain] > held_per_domain:
                continue
        kept.append(j)
    jobs = kept
    for j in jobs:
        j["temperature"] = 0.0 if j["held_out"] or rng.random() < greedy_share else SAMPLED["temperature"]
    return jobs


def _job_seed(seed: int, job_id: str) -> int:
    """Each text's own sampling seed: the same on a resumed run."""
    return int(hashlib.sha256(f"{seed}:{job_id}".encode()).hexdigest()[:8], 16)


def generate(
    model,
    out: Path,
    jobs: list[dict],
    *,
    max_tokens: int,
    n_seq: int = 16,
    seed: int = 0,
    deadline: float | None = None,
    log=print,
) -> Path:
    """Run the jobs through one pymtp.Batch of n_seq slots (plain batched decoding: every
    active text advances in one target decode per step), appending each finished text to
    ``out``; ids already in ``out`` are skipped (resume). Past ``deadline`` (time.time())
    no new text starts; the running ones finish."""
    import pymtp
    from pymtp.config import GenerationConfig, SamplingConfig

    done = {d["id"] for d in read_jsonl(out)} if out.exists() else set()
    todo = [j for j in jobs if j["id"] not in done]
    log(f"trunk text: {len(done)} of {len(jobs)} texts already written, {len(todo)} to go")
    if not todo:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    _drop_partial_line(out)
    n_ctx = max(len(j["prompt"]) for j in todo) + max_tokens + 1
    limits = GenerationConfig(max_tokens=max_tokens)
    t0, n_tok = time.time(), 0
    with open(out, "a") as f, pymtp.Batch(model, n_seq=n_seq, n_ctx=n_ctx, spec=False) as batch:
        waiting = list(todo)
        running: dict[int, tuple[dict, pymtp.BatchItem]] = {}
        while waiting or batch.active:
            if deadline is not None and time.time() > deadline and waiting:
                log(f"  time budget spent: {len(waiting)} texts left for a later run")
                waiting.clear()
            while waiting and batch.free:
                j = waiting.pop(0)
                temp = j["temperature"]
                sampling = SamplingConfig(
                    temperature=temp, top_p=SAMPLED["top_p"] if temp else 1.0, seed=_job_seed(seed, j["id"])
                )
                item = batch.add(j["prompt"], sampling=sampling, limits=limits)
                running[item.seq_id] = (j, item)
            batch.step()
            for seq, (j, item) in list(running.items()):
                if item.finished:
                    del running[seq]
                    assert item.result is not None  # finished
                    toks = list(item.result.tokens)
                    n_tok += len(toks)
                    f.write(json.dumps(j | {"completion": toks}) + "\n")
                    f.flush()
                    done.add(j["id"])
                    if len(done) % 50 == 0:
                        log(
                            f"  {len(done)}/{len(jobs)} texts, {n_tok} new tokens, "
                            f"{n_tok / (time.time() - t0):.0f} tok/s"
                        )
    return out


def _drop_partial_line(path: Path) -> None:
    """Cut a last line an interrupted run left unfinished, so that appending starts clean."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


def read_jsonl(path: Path) -> list[dict]:
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by an interrupted run
                continue
    return out


def trunk_documents(path: Path) -> list[dict]:
    """The generated texts as documents (prompt + completion, counted from the completion)."""
    docs = []
    for t in read_jsonl(path):
        toks = (t["prompt"] + t["completion"])[:WINDOW]
        if len(toks) - len(t["prompt"]) >= 8:
            docs.append(
                {
                    "id": t["id"],
                    "domain": t["domain"],
                    "held_out": t["held_out"],
                    "tokens": toks,
                    "first": len(t["prompt"]),
                    "temperature": t.get("temperature", 0.0),
                }
            )
    return docs


def package_descriptions() -> list[tuple[str, str]]:
    """(package, long description) of the installed distributions whose description is prose
    of some length (READMEs shipped in the metadata)."""
    from importlib import metadata

    out, seen = [], set()
    for dist in metadata.distributions():
        meta: Any = dist.metadata  # an email Message: .get(), get_payload() (not in the protocol's type)
        name = (meta.get("Name") or "").lower()
        if not name or name in seen:
            continue
        seen.add(name)
        body = meta.get_payload() if hasattr(meta, "get_payload") else None
        body = body or meta.get("Description") or ""
        if len(body) >= 2000:
            out.append((name, body))
    return sorted(out)


def human_documents(
    model,
    *,
    code_tokens: int,
    docs_tokens: int,
    seed: int,
    splits: tuple[bool, ...] = (False, True),
    per_source: int = 0,
) -> list[dict]:
    """Windows of WINDOW tokens of stdlib code and package prose: held-out windows up to a
    tenth of each budget, training windows up to the budget (files in a seeded order); only
    the splits named (held_out False / True). per_source > 0: at most that many windows (the
    first ones) of each file or package, so that a budget spreads over many sources (without
    it, 30,000 held-out code tokens came from 6 files, two of them 84% of the windows)."""
    rng = random.Random(seed)
    out = []
    train_files, held_files = data.split_files()
    sources: dict[str, list[tuple[bool, str, Any]]] = {
        "code": [(False, f, None) for f in train_files] + [(True, f, None) for f in held_files],
        "docs": [(_held(n), n, body) for n, body in package_descriptions()],
    }
    budgets = {"code": code_tokens, "docs": docs_tokens}
    for domain, items in sources.items():
        rng.shuffle(items)
        used = {False: 0, True: 0}
        for held, name, body in items:
            if held not in splits:
                continue
            cap = budgets[domain] // 10 if held else budgets[domain]
            if used[held] >= cap:
                continue
            text = body if body is not None else data.read_text(name)
            if not text:
                continue
            toks = model.tokenize(text, add_special=False)
            for i in range(0, len(toks), WINDOW):
                w = toks[i : i + WINDOW]
                if len(w) < 64 or used[held] >= cap or (per_source and i // WINDOW >= per_source):
                    break
                out.append({"id": f"{domain}:{name}:{i}", "domain": domain, "held_out": held, "tokens": w, "first": 1})
                used[held] += len(w)
    return out


def main(argv=None) -> None:
    """Generate the trunk text alone: python -m pymtp.train.teacher_text OUT.jsonl
    [--n-code N] [--minutes M] (a rerun goes on where the last one stopped)."""
    import argparse

    import pymtp

    ap = argparse.ArgumentParser(prog="python -m pymtp.train.teacher_text")
    ap.add_argument("out", type=Path)
    ap.add_argument("--n-code", type=int, default=400, help="stdlib openings the trunk continues")
    ap.add_argument("--minutes", type=float, default=0, help="no new text starts after this (0: no limit)")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--n-seq", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    t0, c0 = time.time(), time.process_time()
    with pymtp.load() as s:
        jobs = generation_jobs(s.model, n_code=args.n_code, seed=args.seed)
        deadline = t0 + 60 * args.minutes if args.minutes > 0 else None
        generate(s, args.out, jobs, max_tokens=args.max_tokens, n_seq=args.n_seq, seed=args.seed, deadline=deadline)
    print(f"trunk text: {time.time() - t0:.0f} s, {time.process_time() - c0:.0f} CPU-s", flush=True)


if __name__ == "__main__":
    main()
