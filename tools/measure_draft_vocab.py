"""Trimmed draft vocabulary (SpecConfig.draft_vocab): draft cost per token and acceptance against
N, on one model, with short and long contexts.

    python tools/measure_draft_vocab.py [--model default] [--sizes 2048,4096,8192,16384,0]

* draft cost: one draft-context decode of one token with its logits (the head's block plus
  its projection onto N rows, or all rows for N = 0), N interleaved, median of --repeats;
* acceptance at draft length 1: greedy generations with n_draft=1 (the text is the same for
  every N: greedy speculation is lossless, and the script checks it), short prompts (chat
  questions, code starts) and long ones (a standard-library file of ~1,500 tokens, then
  "continue"), accepted / drafted.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import pymtp
from pymtp.chat import chat_prompt
from pymtp.draft_vocab import calibration_files, frequent_tokens

SHORT = [
    "Explain how a hash table works.",
    "Write a short story about a robot learning to paint.",
    "What are the trade-offs between TCP and UDP?",
    "def fibonacci(n):",
    "import numpy as np\n\ndef softmax(x):",
]


def long_prompts(s, n_tokens: int = 1500) -> list[list[int]]:
    """Held-back text: the end of the standard-library files the calibration never reads."""
    out = []
    for f in calibration_files()[-40:][::8]:
        toks = s.tokenize(f.read_text(encoding="utf-8", errors="replace"))
        if len(toks) > n_tokens + 200:
            out.append(toks[-n_tokens - 200 : -200])
    return out[:4]


def draft_cost(s, sizes: list[int], repeats: int) -> dict[int, float]:
    toks = s.tokenize("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1)")
    n = len(toks)
    t = pymtp.TargetContext(s.model, n_ctx=256, n_batch=64, n_threads=s.n_threads)
    t.decode(toks, 0)
    h = t.hidden().copy()
    d = pymtp.DraftContext(t, n_batch=64, n_threads=s.n_threads)
    d.decode(toks[1:], 1, h[0], h[1 : n - 1], output=np.zeros(n - 1, np.uint8))
    times: dict[int, list[float]] = {k: [] for k in sizes}
    ids = {k: (frequent_tokens(s.model, k) if k else []) for k in sizes}
    one = np.ones(1, np.uint8)
    for _ in range(repeats):
        for k in sizes:
            d.set_vocab(ids[k])
            t0 = time.perf_counter()
            d.decode([toks[5]], n, h[-1], output=one)
            d.logits()
            times[k].append(time.perf_counter() - t0)
            d.seq_rm(n)
    d.close()
    t.close()
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def acceptance(s, prompts, sizes: list[int], max_tokens: int) -> dict[int, float]:
    acc = {k: [0, 0] for k in sizes}
    for p in prompts:
        texts = set()
        for k in sizes:
            r = pymtp.generate(p, s, max_tokens=max_tokens, speculative={"n_draft": 1, "draft_vocab": k})
            acc[k][0] += r.stats.n_accepted
            acc[k][1] += r.stats.n_drafted
            texts.add(tuple(r.tokens))
        assert len(texts) == 1, "greedy speculation must not depend on the draft vocabulary"
    return {k: a / max(1, d) for k, (a, d) in acc.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--sizes", default="2048,4096,8192,16384,0", help="N values; 0 = the whole vocabulary")
    ap.add_argument("--repeats", type=int, default=60)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    with pymtp.load(args.model, n_threads=args.threads) as s:
        cost = draft_cost(s, sizes, args.repeats)
        short = [
            chat_prompt(s.model, [{"role": "user", "content": p}]) if not p.startswith(("def", "import")) else p
            for p in SHORT
        ]
        long = [toks + s.tokenize("\n# continue\n", add_special=False) for toks in long_prompts(s)]
        a_short = acceptance(s, short, sizes, args.max_tokens)
        a_long = acceptance(s, long, sizes, args.max_tokens)
        full = cost.get(0)
        print(f"model {s.model.path.name}, vocabulary {s.model.n_vocab:,}, {args.threads} threads")
        print(f"{'N':>8} | {'draft ms/token':>14} | {'cut vs all':>10} | {'accept short':>12} | {'accept long':>11}")
        for k in sizes:
            cut = f"{full / cost[k]:.2f}x" if full else "-"
            print(f"{k if k else 'all':>8} | {cost[k]:14.3f} | {cut:>10} | {a_short[k]:12.3f} | {a_long[k]:11.3f}")


if __name__ == "__main__":
    main()
