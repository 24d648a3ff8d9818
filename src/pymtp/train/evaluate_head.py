"""Acceptance of an assembled MTP model, measured in llama.cpp through pymtp.

    python -m pymtp.train.evaluate_head [--model PATH] [--work build/pymtp-head]

* draft length 1, teacher-forced: the share of positions p where the head's argmax from
  (x(p+1), h(p)) equals the trunk's argmax at p+1, over
  - held-out human text: standard-library files never trained on (first 512 tokens each);
  - held-out text the trunk generates greedily (chat answers and prose, completion part);
* P(first k accepted), k = 1..3: real greedy speculative generations (n_draft = 3) from the
  held-out chat prompts and held-out code prefixes; accepted_at[k-1] / drafted_at[k-1].

Needs only numpy and pymtp (no torch).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from . import corpus, data

WINDOW = 512


def teacher_forced(model, seqs: list[tuple[list[int], int]]) -> tuple[int, int]:
    """(agreements, positions) of head argmax vs trunk argmax one step later; each item is
    (tokens, first position counted)."""
    import pymtp

    t = pymtp.TargetContext(model, n_ctx=WINDOW, n_batch=WINDOW)
    d = pymtp.DraftContext(t)
    agree = total = 0
    for toks, first in seqs:
        toks = toks[:WINDOW]
        if len(toks) < 3:
            continue
        t.seq_rm(0)
        d.seq_rm(0)
        t.decode(toks, 0)
        trunk_next = t.logits().argmax(1)             # row q predicts x(q+1)
        h = t.hidden().copy()
        d.decode(toks[1:], 0, h[0], h[1:-1])          # row p: (x(p+1), h(p)) predicts x(p+2)
        head_next = d.logits().argmax(1)
        p = np.arange(max(0, first - 1), len(toks) - 1)
        agree += int((head_next[p] == trunk_next[p + 1]).sum())
        total += len(p)
    d.close()
    t.close()
    return agree, total


def speculative(model, prompts: list[list[int]], max_tokens: int, n_draft: int = 3) -> list[float]:
    """P(first k accepted) for k = 1..n_draft over greedy speculative generations."""
    import pymtp

    acc = np.zeros(n_draft)
    dra = np.zeros(n_draft)
    for p in prompts:
        r = pymtp.generate(p, model, max_tokens=max_tokens, speculative={"n_draft": n_draft})
        acc[:len(r.stats.accepted_at)] += r.stats.accepted_at[:n_draft]
        dra[:len(r.stats.drafted_at)] += r.stats.drafted_at[:n_draft]
    return [float(a / d) if d else 0.0 for a, d in zip(acc, dra)]


def evaluate(model_path: Path, texts_path: Path, n_code: int = 40, max_tokens: int = 96) -> dict:
    import pymtp

    model = pymtp.load(model_path, n_ctx=2048)
    _, held_files = data.split_files()
    code = []
    for rel in held_files:
        text = data.read_text(rel)
        if text:
            code.append(model.tokenize(text, add_special=False)[:WINDOW])
        if len(code) == n_code:
            break
    gen = [t for t in corpus.read_texts(texts_path) if t["held_out"]]
    a_code, n_code_pos = teacher_forced(model, [(c, 1) for c in code])
    by_kind = {}
    for kind in sorted({g["kind"] for g in gen}):
        by_kind[kind] = teacher_forced(model, [(g["prompt"] + g["completion"], len(g["prompt"]))
                                               for g in gen if g["kind"] == kind])
    a_gen, n_gen_pos = (sum(v[i] for v in by_kind.values()) for i in (0, 1))
    prompts = [g["prompt"] for g in gen if g["kind"] == "chat"][:32] + [c[:64] for c in code[:10]]
    firstk = speculative(model, prompts, max_tokens)
    model.close()
    return {"model": str(model_path),
            "k1_human_code": round(a_code / max(n_code_pos, 1), 4), "k1_human_code_positions": n_code_pos,
            "k1_trunk_greedy": round(a_gen / max(n_gen_pos, 1), 4), "k1_trunk_greedy_positions": n_gen_pos,
            "k1_trunk_greedy_by_kind": {k: round(a / max(n, 1), 4) for k, (a, n) in by_kind.items()},
            "p_first_k_accepted": [round(x, 4) for x in firstk], "speculative_prompts": len(prompts)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m pymtp.train.evaluate_head", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="an assembled GGUF (default: pymtp's default model)")
    ap.add_argument("--work", default="build/pymtp-head", help="where texts.jsonl is (python -m pymtp.train)")
    ap.add_argument("--texts", default="texts2.jsonl",
                    help="the trunk texts in --work whose held-out items are measured (texts.jsonl: stage 1's)")
    args = ap.parse_args(argv)
    from pymtp import default_model

    path = Path(args.model) if args.model else default_model.resolve(None)
    print(json.dumps(evaluate(path, Path(args.work) / args.texts), indent=1))


if __name__ == "__main__":
    main()
