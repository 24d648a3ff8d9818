"""Round 8's certification table from the run logs: per workload (model, sampling, prompt set) and
side, auto x plain and auto x the best fixed length of the same run, per run and the median.

    python collect.py /tmp/p9/r8            (the logs of run.sh and streams.sh)
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

LINE = re.compile(r"^\s+(\S+)\s+(greedy|qwen)\s+(\w+): ([\d.]+)x plain, ([\d.]+)x (\S+)")
STREAM = re.compile(r"^(\S+)\s+4 streams:\s+([\d.]+) tok/s")


def main(root: Path) -> None:
    cells: dict[tuple, list[tuple[str, float, float, str]]] = {}  # (workload, sampling, set) -> runs
    for log in sorted(root.glob("*.log")):
        side, group, rnd = log.stem.split("-")[0], log.stem.split("-")[-2], log.stem.split("-")[-1]
        if group == "streams4":
            tps = {m.group(1): float(m.group(2)) for m in map(STREAM.match, log.read_text().splitlines()) if m}
            if "auto" in tps and "plain" in tps:
                fixed = max((v, k) for k, v in tps.items() if k.startswith("k"))
                cells.setdefault(("default 4 streams", "greedy", "all"), []).append(
                    (f"{side} {rnd}", tps["auto"] / tps["plain"], tps["auto"] / fixed[0], fixed[1])
                )
                if "llama-server" in tps:
                    print(f"{side} {rnd}: 4 streams auto {tps['auto']:.1f} tok/s, llama-server {tps['llama-server']:.1f} ({tps['auto'] / tps['llama-server']:.2f}x)")
            continue
        for m in map(LINE.match, log.read_text().splitlines()):
            if m:
                model, sampling, kind = m.group(1), m.group(2), m.group(3)
                model = "echo-100" if "a100" in model else "echo-70" if "a70" in model else "deep" if "deep" in model else "default"
                if group == "chat":
                    kind = "chat" if kind == "all" else None
                if kind:
                    cells.setdefault((model, sampling, kind), []).append(
                        (f"{side} {rnd}", float(m.group(4)), float(m.group(5)), m.group(6))
                    )
    print(f"{'workload':32s} {'side':6s} {'auto x plain':>12s} {'auto x best':>11s}  per run (x best fixed)")
    for key, runs in sorted(cells.items()):
        for side in sorted({r[0].split()[0] for r in runs}):
            mine = [r for r in runs if r[0].split()[0] == side]
            xp = statistics.median(r[1] for r in mine)
            xb = statistics.median(r[2] for r in mine)
            per = " ".join(f"{r[2]:.2f}({r[3]})" for r in mine)
            print(f"{' '.join(key):32s} {side:6s} {xp:12.2f} {xb:11.2f}  {per}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/p9/r8"))
