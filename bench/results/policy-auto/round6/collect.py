"""runs.csv from the round's bench.json files: one row per measured generation (warm-ups left out).

python collect.py /tmp/p6/r5 > runs.csv
"""

import csv
import json
import pathlib
import sys

NAMES = {"echo-a100": "echo-100", "echo-a70-": "echo-70", "echo-a80-1.5b": "echo-80-1.5b", "-deep-": "deep"}


def short(model: str) -> str:
    return next((v for k, v in NAMES.items() if k in model), "default")


w = csv.writer(sys.stdout)
w.writerow(["side", "round", "model", "sampling", "prompt", "variant", "tps", "n_steps", "n_drafted", "n_accepted"])
for path in sorted(pathlib.Path(sys.argv[1]).glob("*-r*/bench.json")):
    side, _group, rnd = path.parent.name.rsplit("-", 2)
    for r in json.load(open(path))["runs"]:
        if r.get("warmup") or r.get("engine") != "pymtp" or not r.get("ok", True):
            continue
        prompt = f"{r['prompt']}.{r['repeat']}" if r.get("repeat", 0) > 0 else r["prompt"]
        w.writerow(
            [
                side,
                rnd[1:],
                short(r["model"]),
                r["sampling"],
                prompt,
                r["variant"],
                round(r["tps"], 1),
                r["n_steps"],
                r["n_drafted"],
                r["n_accepted"],
            ]
        )
