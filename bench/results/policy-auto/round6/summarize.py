"""Round 4 summary from runs.csv: per (model, sampling) and side, the median tok/s of plain, auto
and the best fixed length over all runs, auto x plain and x best fixed (ratios of those medians),
the median of auto/plain paired by prompt and round, and auto's median tokens per step.

    python summarize.py runs.csv
"""

import collections
import csv
import statistics
import sys

rows = list(csv.DictReader(open(sys.argv[1] if len(sys.argv) > 1 else "runs.csv")))
tps = collections.defaultdict(list)
paired = collections.defaultdict(dict)
per_step = collections.defaultdict(list)
for r in rows:
    cell = (r["model"], r["sampling"], r["side"])
    tps[cell + (r["variant"],)].append(float(r["tps"]))
    paired[cell + (r["prompt"], r["round"])][r["variant"]] = float(r["tps"])
    if r["variant"] == "mtp-auto":
        per_step[cell].append((int(r["n_accepted"]) + int(r["n_steps"])) / int(r["n_steps"]))
print(
    f"{'model':9s} {'sampling':8s} {'side':5s} {'plain':>6s} {'auto':>6s} {'best fixed':>13s} "
    f"{'x plain':>7s} {'x best':>6s} {'paired x plain':>14s} {'tok/step':>8s} n"
)
for model, samp, side in sorted({k[:3] for k in tps}):
    med = {v: statistics.median(x) for (m, s, d, v), x in tps.items() if (m, s, d) == (model, samp, side)}
    fixed = {v: t for v, t in med.items() if v.startswith("mtp-") and v[4:].isdigit()}
    best = max(fixed, key=fixed.get)
    pr = [d["mtp-auto"] / d["plain"] for k, d in paired.items() if k[:3] == (model, samp, side)]
    a, p = med["mtp-auto"], med["plain"]
    steps = statistics.median(per_step[(model, samp, side)])
    print(
        f"{model:9s} {samp:8s} {side:5s} {p:6.1f} {a:6.1f} {best:>6s} {fixed[best]:6.1f} {a / p:7.2f} "
        f"{a / fixed[best]:6.2f} {statistics.median(pr):14.2f} {steps:8.2f} {len(pr)}"
    )
