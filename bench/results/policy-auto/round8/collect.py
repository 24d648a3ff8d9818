"""Round 8's certification table from the run logs: per workload (model, sampling, prompt set) and
side, auto x plain and auto x the best fixed length, medians over the runs.

Two "best fixed": the best of each run (what `pymtp bench` prints: the highest of 3-4 noisy
medians, so a policy that matched the best length exactly would still come out below 1), and the
one length that is best over all the runs of the cell (the median over runs of each length's
x plain), against which each run's auto is taken.

    python collect.py /tmp/p9/r8            (the logs of run.sh and streams.sh)
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

ROW = re.compile(r"^(\S+)\s+(greedy|qwen)\s+(all|code|prose)\s+(plain|mtp-\d+|mtp-auto)\s+([\d.]+)\s")
STREAM = re.compile(r"^(\S+)\s+4 streams:\s+([\d.]+) tok/s")


def workload(model: str) -> str:
    return "echo-100" if "a100" in model else "echo-70" if "a70" in model else "deep" if "deep" in model else "default"


def main(root: Path) -> None:
    # (workload, sampling, set) -> side -> [(run, {variant: tok/s})]
    cells: dict[tuple, dict[str, list[tuple[str, dict[str, float]]]]] = {}
    for log in sorted(root.glob("*.log")):
        side, group, rnd = log.stem.split("-")[0], log.stem.split("-")[-2], log.stem.split("-")[-1]
        text = log.read_text().splitlines()
        if group == "streams4":
            tps = {m.group(1): float(m.group(2)) for m in map(STREAM.match, text) if m}
            if "auto" in tps and "plain" in tps:
                run = {"mtp-auto": tps["auto"], "plain": tps["plain"]}
                run.update({f"mtp-{k[1:]}": v for k, v in tps.items() if re.fullmatch(r"k\d+", k)})
                cells.setdefault(("default 4 streams", "greedy", "all"), {}).setdefault(side, []).append((rnd, run))
                if "llama-server" in tps:
                    print(
                        f"{side} {rnd}: 4 streams auto {tps['auto']:.1f} tok/s, plain {tps['plain']:.1f}, "
                        f"llama-server {tps['llama-server']:.1f} (auto {tps['auto'] / tps['llama-server']:.2f}x)"
                    )
            continue
        runs: dict[tuple, dict[str, float]] = {}
        for m in map(ROW.match, text):
            if m:
                kind = m.group(3)
                if group == "chat":
                    if kind != "all":
                        continue
                    kind = "chat"
                runs.setdefault((workload(m.group(1)), m.group(2), kind), {})[m.group(4)] = float(m.group(5))
        for key, run in runs.items():
            cells.setdefault(key, {}).setdefault(side, []).append((rnd, run))
    print(
        f"\n{'workload':28s} {'side':6s} {'runs':>4s} {'x plain':>7s} {'x best of run':>13s} "
        f"{'x best overall':>14s}  per run (x best of run)"
    )
    for key, sides in sorted(cells.items()):
        for side, runs in sorted(sides.items()):
            xp = statistics.median(r["mtp-auto"] / r["plain"] for _, r in runs)
            of_run = [r["mtp-auto"] / max(v for k, v in r.items() if k[4:].isdigit()) for _, r in runs]
            fixed = {k for _, r in runs for k in r if k[4:].isdigit()}
            overall = max(fixed, key=lambda k: statistics.median(r[k] / r["plain"] for _, r in runs if k in r))
            xo = statistics.median(r["mtp-auto"] / r[overall] for _, r in runs if overall in r)
            print(
                f"{' '.join(key):28s} {side:6s} {len(runs):4d} {xp:7.2f} {statistics.median(of_run):13.2f} "
                f"{xo:9.2f} {overall:>4s}  {' '.join(f'{x:.2f}' for x in of_run)}"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/p9/r8"))
