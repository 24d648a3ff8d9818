"""Round 12 (#29): how far "auto x the best fixed length of the run" is biased, from round 11's
16 alternating rounds a side (the `pymtp bench` logs in ../round11/logs: per run and cell the
median tok/s of auto, plain and mtp-1..4 over the run's 2 generations).

Per cell and side, three medians over the runs, each with a 95% bootstrap interval (the runs
resampled with replacement, auto and the fixed lengths of a run kept together):

* of run: auto / max(mtp-1..4 of the same run), what `pymtp bench` prints and #29's target names;
* of L*:  auto / mtp-L* of the same run, L* the one length best over all runs of the cell
  (median of x plain), chosen again in each resample (the choice is part of the estimate);
* L* of run: mtp-L* / max(mtp-1..4 of the same run): what the first estimator gives a policy
  that is exactly the best fixed length (its bias: the max of 4 noisy medians sits above any one);
  its median is 1 wherever L* wins most runs, so its mean over the runs is printed too.
Then, where a cell has both sides, the change's "x L*" minus main's (the runs paired by round),
and the same pooled over the echo-70 and the deep cells.

    python stats.py [../round11/logs] [--boot 4000] [--sides main,p12]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
from pathlib import Path

ROW = re.compile(r"^(\S+)\s+(greedy|qwen)\s+(all|code|prose)\s+(plain|mtp-\d+|mtp-auto)\s+([\d.]+)\s")


def workload(model: str) -> str:
    return "echo-70" if "a70" in model else "deep" if "deep" in model else "echo-100" if "a100" in model else "default"


def load(root: Path) -> dict[tuple, dict[str, list[dict[str, float]]]]:
    """(workload, sampling, set) -> side -> runs (in round order) of {variant: tok/s}."""
    cells: dict[tuple, dict[str, dict[int, dict[str, float]]]] = {}
    for log in root.glob("*.log"):
        side, _group, rnd = log.stem.split("-")
        for m in map(ROW.match, log.read_text().splitlines()):
            if m:
                key = (workload(m.group(1)), m.group(2), m.group(3))
                cells.setdefault(key, {}).setdefault(side, {}).setdefault(int(rnd[1:]), {})[m.group(4)] = float(
                    m.group(5)
                )
    return {k: {s: [runs[r] for r in sorted(runs)] for s, runs in v.items()} for k, v in cells.items()}


def fixed(run: dict[str, float]) -> list[str]:
    return [k for k in run if k[4:].isdigit()]


def best_length(runs: list[dict[str, float]]) -> str:
    names = fixed(runs[0])
    return max(names, key=lambda k: statistics.median(r[k] / r["plain"] for r in runs))


def estimates(runs: list[dict[str, float]]) -> tuple[float, float, float]:
    star = best_length(runs)
    of_run = statistics.median(r["mtp-auto"] / max(r[k] for k in fixed(r)) for r in runs)
    of_star = statistics.median(r["mtp-auto"] / r[star] for r in runs)
    star_of_run = statistics.median(r[star] / max(r[k] for k in fixed(r)) for r in runs)
    return of_run, of_star, star_of_run


def interval(runs, stat, boot: int, rng: random.Random) -> tuple[float, float]:
    xs = sorted(stat([rng.choice(runs) for _ in runs]) for _ in range(boot))
    return xs[int(0.025 * boot)], xs[int(0.975 * boot) - 1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", nargs="?", default=str(Path(__file__).parent.parent / "round11" / "logs"))
    ap.add_argument("--boot", type=int, default=4000)
    ap.add_argument("--sides", default="main,p12", help="the base side and the change's, as the logs name them")
    args = ap.parse_args()
    cells = load(Path(args.root))
    base, change = args.sides.split(",")
    rng = random.Random(12)
    print(
        f"{'cell':22s} {'side':4s} {'n':>2s} {'L*':>5s}  {'x best of run [95%]':>20s}  "
        f"{'x L* [95%]':>20s}  {'L* x best of run [95%]':>22s}  (its mean)"
    )
    for key in sorted(cells):
        sides = cells[key]
        for side in sorted(sides):
            runs = sides[side]
            e = estimates(runs)
            cis = [interval(runs, lambda rs, i=i: estimates(rs)[i], args.boot, rng) for i in range(3)]
            cols = "  ".join(f"{v:.3f} [{lo:.3f} {hi:.3f}]" for v, (lo, hi) in zip(e, cis))
            star = best_length(runs)
            mean_bias = statistics.mean(r[star] / max(r[k] for k in fixed(r)) for r in runs)
            print(f"{' '.join(key):22s} {side:4s} {len(runs):2d} {star:>5s}  {cols}  {mean_bias:.3f}")
        if len(sides) == 2:
            # the two sides' runs paired by round (same machine state, alternating): the difference
            # of their "of L*" medians, resampling rounds
            a, b = sides[base], sides[change]
            n = min(len(a), len(b))
            pairs = list(zip(a[:n], b[:n]))

            def diff(ps):
                return estimates([p[1] for p in ps])[1] - estimates([p[0] for p in ps])[1]

            lo, hi = interval(pairs, diff, args.boot, rng)
            print(f"{'':22s} {change} - {base}, x L*: {diff(pairs):+.3f} [{lo:+.3f} {hi:+.3f}]")
    pooled(cells, args.boot, rng, base, change)


def pooled(cells, boot: int, rng: random.Random, base: str, change: str) -> None:
    """p12 - main over several cells at once: the mean over cells of the difference of their
    "x L*" medians, the rounds resampled together (a round ran every cell of both sides)."""
    groups = {
        "echo-70 code+prose": [k for k in cells if k[0] == "echo-70" and k[2] != "all"],
        "deep code+prose": [k for k in cells if k[0] == "deep" and k[2] != "all"],
    }
    groups["all 8 code+prose"] = groups["echo-70 code+prose"] + groups["deep code+prose"]
    groups["default code+prose"] = [k for k in cells if k[0] == "default" and k[2] != "all"]
    for name, keys in groups.items():
        keys = [k for k in keys if base in cells[k] and change in cells[k]]
        if not keys:
            continue
        n = min(len(cells[k][s]) for k in keys for s in (base, change))

        def stat(rounds, keys=keys):
            return statistics.mean(
                estimates([cells[k][change][r] for r in rounds])[1] - estimates([cells[k][base][r] for r in rounds])[1]
                for k in keys
            )

        lo, hi = interval(list(range(n)), stat, boot, rng)
        print(f"pooled {change} - {base}, x L*, {name}: {stat(list(range(n))):+.3f} [{lo:+.3f} {hi:+.3f}]")


if __name__ == "__main__":
    main()
