"""Tokens/s of plain decoding, the MTP head, prompt lookup and the hybrid of both on a code-edit
chat and a no-repetition chat, interleaved, medians.

    python tools/measure_drafters.py [--model default] [--repeats 3] [--tokens 128] [--threads 2]

Code edit: a held-out standard-library file in the prompt, the model asked to reproduce it
with one name changed. No repetition: the model asked to write a new function.
"""

from __future__ import annotations

import argparse
import statistics

import pymtp
from pymtp.train import data

VARIANTS = {
    "plain": False,
    "mtp-2": {"n_draft": 2},
    "lookup-8": {"drafter": "lookup", "n_draft": 8},
    "hybrid-8": {"drafter": "hybrid", "n_draft": 8},
}


def workloads() -> dict[str, list[dict]]:
    _, heldout = data.split_files()
    text = next(t for t in (data.read_text(f) for f in heldout) if t and 1200 < len(t) < 4000)
    text = text[:1500]
    return {
        "code-edit": [
            {
                "role": "user",
                "content": "Here is a file:\n\n"
                + text
                + "\n\nRewrite the whole file exactly, but rename every `self` to `this`.",
            }
        ],
        "new-code": [{"role": "user", "content": "Write a Python function that merges two sorted lists."}],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    session = pymtp.load(args.model, n_threads=args.threads)
    rows: dict = {}
    for _ in range(args.repeats):
        for wname, msgs in workloads().items():
            for vname, spec in VARIANTS.items():
                pymtp.generate("unrelated", session, max_tokens=1, speculative=False)  # no reuse
                r = pymtp.chat(msgs, session, max_tokens=args.tokens, ignore_eos=True, speculative=spec)
                st = r.stats
                rows.setdefault((wname, vname), []).append(
                    (st.tokens_per_second, st.tokens_per_step, st.acceptance_rate, st.by_source)
                )
    print(f"{pymtp.system_info()}; threads {args.threads}; {args.tokens} tokens; medians of {args.repeats}")
    for wname in workloads():
        base = statistics.median(x[0] for x in rows[wname, "plain"])
        for vname in VARIANTS:
            v = rows[wname, vname]
            tps = statistics.median(x[0] for x in v)
            src = ", ".join(f"{k} {d}/{a}" for k, (d, a) in sorted(v[-1][3].items()))
            print(
                f"{wname:10s} {vname:9s} {tps:7.1f} tok/s  x plain {tps / base:5.2f}  "
                f"tokens/step {statistics.median(x[1] for x in v):5.2f}  "
                f"acceptance {statistics.median(x[2] for x in v):.2f}  drafted/accepted by source (last run): {src}"
            )


if __name__ == "__main__":
    main()
