"""A second view of the same runs, less moved by a load burst on one generation: per run, each
variant's tokens over the seconds its steps took (summed over prompts and repeats), and auto
against plain and the best fixed length by that measure; the median over the runs per side.

    python steps.py /tmp/p9/r8          (the run.sh output folders, each with its bench.json)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def rates(path: Path) -> dict[tuple, dict[str, float]]:
    """(model, sampling, set) -> variant -> tokens per second of step time."""
    sums: dict[tuple, dict[str, list[float]]] = {}
    for r in json.loads(path.read_text())["runs"]:
        if r["warmup"] or not r.get("ok") or r["engine"] != "pymtp":
            continue
        model = r["model"]
        model = (
            "echo-100" if "a100" in model else "echo-70" if "a70" in model else "deep" if "deep" in model else "default"
        )
        for kind in ("all", r["kind"]):
            s = sums.setdefault((model, r["sampling"], kind), {}).setdefault(r["variant"], [0.0, 0.0])
            s[0] += r["n_tokens"]
            s[1] += r["t_total"]
    return {k: {v: t / max(sec, 1e-9) for v, (t, sec) in vs.items()} for k, vs in sums.items()}


def main(root: Path) -> None:
    cells: dict[tuple, list[tuple[str, float, float]]] = {}
    for run in sorted(p for p in root.iterdir() if (p / "bench.json").is_file()):
        side, group = run.name.split("-")[0], run.name.split("-")[1]
        for (model, sampling, kind), tps in rates(run / "bench.json").items():
            if "mtp-auto" not in tps or "plain" not in tps:
                continue
            if group == "chat":
                if kind != "all":
                    continue
                kind = "chat"
            best = max(v for k, v in tps.items() if k.startswith("mtp-") and k[4:].isdigit())
            cells.setdefault((model, sampling, kind, side), []).append(
                (run.name, tps["mtp-auto"] / tps["plain"], tps["mtp-auto"] / best)
            )
    print(
        f"{'workload':32s} {'side':6s} {'auto x plain':>12s} {'auto x best':>11s}  per run (x best fixed), by step time"
    )
    for (model, sampling, kind, side), runs in sorted(cells.items()):
        xp = statistics.median(r[1] for r in runs)
        xb = statistics.median(r[2] for r in runs)
        print(
            f"{model + ' ' + sampling + ' ' + kind:32s} {side:6s} {xp:12.2f} {xb:11.2f}  "
            + " ".join(f"{r[2]:.2f}" for r in runs)
        )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/p9/r8"))
