"""A draft-vocabulary ranking for the default model from the distillation corpus, mixed with
the standard-library counts (pymtp.draft_vocab), and the choice of the mix.

    python -m pymtp.train.vocab_rank --mix 0,0.5,0.75,1 [--write]

Corpus counts: the tokens the trunk predicts (positions from each document's ``first``) in the
TRAINING split of selfdistill's teacher shards (trunk-written chat, prose and code, and the
human code and prose). A mix w ranks tokens by w * corpus share + (1 - w) * stdlib share, so
that tokens frequent in code but rare in the (mostly chat and prose) corpus keep their place.

Each mix is scored by teacher-forced agreement at draft length 1 (evaluate_head's figure:
shipped head, argmax over the set against the trunk's next argmax) on a SELECTION set of
held-out documents that evaluate_head's report does not use: held-out trunk texts past the
first --skip of each domain (evaluate_head's default --per-domain is 12) and held-out human
windows drawn with another seed, minus those evaluate_head takes. --write saves the chosen
mix's ranking (the first draft_vocab.SHIPPED_LEN ids) as the default model's shipped list.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from . import teacher, teacher_text


def corpus_counts(teacher_dir: Path, n_vocab: int) -> np.ndarray:
    """Counts of the predicted tokens of the training split's documents (hidden rows unread)."""
    man = json.loads((teacher_dir / teacher.MANIFEST).read_text())
    counts = np.zeros(n_vocab, np.int64)
    for sh in man["shards"]:
        with np.load(teacher_dir / sh["file"]) as z:
            toks, offs, first, held = z["tokens"], z["offsets"], z["first"], z["held_out"]
        for i in range(len(offs) - 1):
            if not held[i]:
                s, e = int(offs[i]) + int(first[i]), int(offs[i + 1])
                counts += np.bincount(toks[s:e], minlength=n_vocab)
    return counts


def mixed_ranking(corpus: np.ndarray, stdlib: np.ndarray, w: float) -> np.ndarray:
    """Token ids by w * corpus share + (1 - w) * stdlib share, descending (ties: lower id)."""
    score = w * corpus / max(corpus.sum(), 1) + (1 - w) * stdlib / max(stdlib.sum(), 1)
    return np.argsort(-score, kind="stable").astype(np.int32)


def selection_documents(model, text: Path, *, skip: int, per_domain: int, human_tokens: int) -> list[dict]:
    """Held-out documents evaluate_head's report does not measure (see the module's note)."""
    from .evaluate_head import TRUNK_DOMAINS, held_out_documents

    reported = {d["id"] for d in held_out_documents(model, text, per_domain=skip, human_tokens=human_tokens)}
    gen = [d for d in teacher_text.trunk_documents(text) if d["held_out"] and d["id"] not in reported]
    docs = []
    for dom in TRUNK_DOMAINS:
        docs += [d for d in gen if d["domain"] == dom][:per_domain]
    human = teacher_text.human_documents(
        model, code_tokens=20 * human_tokens, docs_tokens=20 * human_tokens, seed=1, splits=(True,)
    )
    return docs + [d for d in human if d["id"] not in reported]


def score_sets(model, docs: list[dict], sets: dict[str, np.ndarray], log=print) -> dict:
    """Agreement per domain and overall for each vocabulary set, from one head pass per document."""
    import pymtp

    t = pymtp.TargetContext(model, n_ctx=teacher_text.WINDOW, n_batch=teacher_text.WINDOW)
    d = pymtp.DraftContext(t)
    counts: dict[str, dict[str, np.ndarray]] = {name: {} for name in sets}
    try:
        for k, doc in enumerate(docs):
            toks = doc["tokens"][: teacher_text.WINDOW]
            if len(toks) < 3:
                continue
            t.seq_rm(0)
            t.decode(toks, 0)
            trunk_next, h = t.logits().argmax(1), t.hidden().copy()
            d.seq_rm(0)
            d.decode(toks[1:], 0, h[0], h[1:-1])
            logits = d.logits()
            p = np.arange(max(0, doc["first"] - 2), len(toks) - 1)
            for name, ids in sets.items():
                head = ids[logits[:, ids].argmax(1)]
                c = counts[name].setdefault(doc["domain"], np.zeros(2, np.int64))
                c += [(head[p] == trunk_next[p + 1]).sum(), len(p)]
            if k % 20 == 0:
                log(f"  {k}/{len(docs)} documents")
    finally:
        d.close()
        t.close()
    out = {}
    for name, per in counts.items():
        fig = {dom: round(c[0] / max(c[1], 1), 4) for dom, c in sorted(per.items())}
        tot = sum(per.values(), np.zeros(2, np.int64))
        fig["all"] = round(tot[0] / max(tot[1], 1), 4)
        fig["positions"] = int(tot[1])
        out[name] = fig
    return out


def main(argv=None) -> None:
    import pymtp
    from pymtp import draft_vocab

    from .evaluate_head import assemble
    from .selfdistill import SHIPPED, default_work

    ap = argparse.ArgumentParser(prog="python -m pymtp.train.vocab_rank", description=__doc__)
    ap.add_argument("--mix", default="0,0.5,0.75,1", help="corpus weights to compare (0 = stdlib only)")
    ap.add_argument("--n", type=int, default=4096, help="draft vocabulary size scored")
    ap.add_argument("--work", type=Path, default=None, help="selfdistill's work folder (default: the cache's)")
    ap.add_argument("--skip", type=int, default=12, help="held-out trunk texts per domain evaluate_head reports")
    ap.add_argument("--per-domain", type=int, default=16, help="selection trunk texts per domain")
    ap.add_argument("--human-tokens", type=int, default=6_000, help="evaluate_head's --human-tokens")
    ap.add_argument("--write", type=float, default=None, help="save this mix's ranking as the shipped list")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    work = args.work or default_work()
    s = pymtp.load(assemble(SHIPPED), n_ctx=2048)
    m = s.model
    corpus = corpus_counts(work / "teacher", m.n_vocab)
    stdlib = draft_vocab.token_counts(m)
    print(f"corpus: {corpus.sum()} training tokens; stdlib: {stdlib.sum()} tokens")
    eog = np.asarray([t for t in (m.eos, m.eot) if t is not None], np.int64)
    if args.write is not None:
        ranking = mixed_ranking(corpus, stdlib, args.write)
        path = draft_vocab.write_shipped(m, ranking[: draft_vocab.SHIPPED_LEN], mix=args.write)
        print(f"wrote {path} ({path.stat().st_size} bytes)")
        return
    sets = {}
    for w in (float(x) for x in args.mix.split(",")):
        top = mixed_ranking(corpus, stdlib, w)[: args.n]
        sets[f"mix{w:g}"] = np.unique(np.concatenate([top, eog])).astype(np.int64)
    docs = selection_documents(
        m, work / "trunk-text.jsonl", skip=args.skip, per_domain=args.per_domain, human_tokens=args.human_tokens
    )
    print(f"{len(docs)} selection documents")
    res = score_sets(m, docs, sets)
    print(json.dumps(res, indent=1))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    s.close()


if __name__ == "__main__":
    main()
