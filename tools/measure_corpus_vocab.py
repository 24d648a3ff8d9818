"""The stdlib-derived draft vocabulary (before) against the shipped corpus-mixed ranking
(after, pymtp.draft_vocab.SHIPPED) on the default model, in one process:

    python tools/measure_corpus_vocab.py OUT.json

* teacher-forced agreement at draft length 1 by domain, both sets (and the full vocabulary)
  scored on the same head logits, over evaluate_head's held-out documents (its defaults:
  12 trunk texts per domain, 6,000 human tokens);
* P(first k accepted) and tokens per step at greedy and at Qwen's sampling settings over
  evaluate_head's 24 held-out prompts, a fresh session per set.
"""

import json
import sys
from pathlib import Path

import numpy as np

import pymtp
from pymtp import draft_vocab
from pymtp.train import evaluate_head as eh
from pymtp.train.selfdistill import SHIPPED, default_work

REAL = draft_vocab.SHIPPED
MISSING = Path("/nonexistent/no-shipped-list.npz")  # frequent_tokens falls back to stdlib counts


def stdlib_set(model, n: int) -> np.ndarray:
    draft_vocab.SHIPPED = MISSING
    try:
        return draft_vocab.frequent_tokens(model, n).astype(np.int64)
    finally:
        draft_vocab.SHIPPED = REAL


def main(out_path: Path) -> None:
    text = default_work() / "trunk-text.jsonl"
    out: dict = {}
    sess = pymtp.load(eh.assemble(SHIPPED), n_ctx=2048)
    m = sess.model
    docs = eh.held_out_documents(m, text, per_domain=12, human_tokens=6000)
    prompts = eh.prompts_for(m, text, 8)
    new, old = draft_vocab.frequent_tokens(m, 4096).astype(np.int64), stdlib_set(m, 4096)
    print(f"{len(docs)} documents, {len(prompts)} prompts, {len(set(new) & set(old))} ids shared", flush=True)
    tf = eh.TeacherForced(m, new, old)  # accept: the new set; accept_corpus_vocab: the stdlib set
    for d in docs:
        tf.add(d["domain"], d["tokens"][: eh.WINDOW], d["first"])
    fig = tf.figures()
    tf.close()
    sess.close()
    out["teacher_forced"] = {
        k: {
            "stdlib_set": v["accept_corpus_vocab"],
            "corpus_mix_set": v["accept"],
            "full": v["accept_full_vocab"],
            "positions": v["positions"],
        }
        for k, v in fig.items()
    }
    print(json.dumps(out["teacher_forced"], indent=1), flush=True)
    for label, sampling in (("greedy", {}), ("qwen_sampling", eh.QWEN)):
        for arm in ("stdlib_set", "corpus_mix_set"):
            draft_vocab.SHIPPED = MISSING if arm == "stdlib_set" else REAL
            s = pymtp.load(eh.assemble(SHIPPED), n_ctx=2048)
            out.setdefault(label, {})[arm] = eh.speculative(s, prompts, 64, sampling, 0)
            s.close()
            print(label, arm, out[label][arm], flush=True)
    draft_vocab.SHIPPED = REAL
    out_path.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
