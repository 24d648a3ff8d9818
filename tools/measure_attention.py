"""CPU flash attention of a decode, patched (0005) against stock, and its share of a decode (issue #28).

    flock /tmp/pymtp-bench.lock python tools/measure_attention.py \\
        --stock-ggml <stock build>/llama.cpp/ggml/src --patched-ggml build-k2/llama.cpp/ggml/src \\
        [--include <llama.cpp>/ggml/include] [--positions 100,2000] [--repeats 15] \\
        [--layers 30] [--batch-cost build/batch_cost.json]

tools/attention/fa_bench.cpp is built against each ggml (static libraries) and times one flash
attention op of the default model's shape (9 query heads, 3 K/V heads of 64, F16 cache, view
padded to 256) for n = 1..8 query rows after `position` cells, on the decode's thread count.
The two builds run alternately, n by n, each printing the median of its repeats; the table
gives those medians, the ratio, and the op times the model's layer count (30): the attention
of one decode. With --batch-cost (the JSON of tools/measure_batch_cost.py, F16 rows), the
attention share of a decode: layers x op / c(n), for each build.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHAPE = dict(heads=9, heads_kv=3, dim=64, layers=30)  # SmolLM2-135M (the default model's trunk)


def build(ggml_src: Path, include: Path, out: Path) -> Path:
    libs = [ggml_src / f"libggml{x}.a" for x in ("", "-cpu", "-base")]
    missing = [str(p) for p in libs if not p.is_file()]
    if missing:
        sys.exit(f"missing static libraries: {missing} (a build with BUILD_SHARED_LIBS=OFF)")
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "c++",
            "-O2",
            "-std=c++17",
            str(HERE / "attention" / "fa_bench.cpp"),
            f"-I{include}",
            *map(str, libs),
            "-fopenmp",
            "-lpthread",
            "-o",
            str(out),
        ],
        check=True,
    )
    return out


def time_op(exe: Path, pos: int, n: int, threads: int, repeats: int, layers: int) -> float:
    s = SHAPE
    args = [str(exe), str(s["heads"]), str(s["heads_kv"]), str(s["dim"]), str(pos), str(n), str(threads), str(repeats)]
    args.append(str(layers))
    return float(subprocess.run(args, check=True, capture_output=True, text=True).stdout.split()[0])


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stock-ggml", required=True, type=Path, help="ggml/src of a stock build (static libraries)")
    ap.add_argument("--patched-ggml", required=True, type=Path, help="ggml/src of a build with patch 0005")
    ap.add_argument("--include", type=Path, default=None, help="ggml/include (default: the pinned tree in the cache)")
    ap.add_argument("--positions", default="100,2000")
    ap.add_argument("--repeats", type=int, default=15, help="timed ops per measurement (median)")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the two builds (median of medians)")
    ap.add_argument("--threads", type=int, default=None, help="threads (default: pymtp's default)")
    ap.add_argument(
        "--layers",
        type=int,
        default=SHAPE["layers"],
        help="ops in the timed graph, each with K/V of its own (default: the model's 30, so the cells come "
        "from memory as in a decode; 1: the same op again, its cells in cache)",
    )
    ap.add_argument("--batch-cost", type=Path, default=None, help="JSON of tools/measure_batch_cost.py")
    ap.add_argument("--work", type=Path, default=Path("build/attention"))
    a = ap.parse_args()

    include = a.include
    if include is None:
        cached = sorted((Path.home() / ".cache" / "pymtp").glob("llama.cpp-*"))
        if not cached:
            sys.exit("--include: no pinned llama.cpp tree in ~/.cache/pymtp")
        include = cached[-1] / "ggml" / "include"
    if a.threads is None:
        from pymtp.model import default_threads

        a.threads = default_threads()
    exes = {
        "stock": build(a.stock_ggml, include, a.work / "fa_bench_stock"),
        "patched": build(a.patched_ggml, include, a.work / "fa_bench_patched"),
    }
    positions = [int(p) for p in a.positions.split(",")]

    times: dict[tuple[str, int, int], list[float]] = {}
    for _ in range(a.rounds):
        for pos in positions:
            for n in range(1, 9):
                for lib in ("stock", "patched"):
                    times.setdefault((lib, pos, n), []).append(
                        time_op(exes[lib], pos, n, a.threads, a.repeats, a.layers)
                    )
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}

    cost = {}
    if a.batch_cost:
        for row in json.loads(a.batch_cost.read_text())["rows"]:
            if row["type"] == "F16":
                c1 = row["c1_ms"]
                cost[(row["build"], row["position"], 1)] = c1
                for n, r in row["ratios"].items():
                    cost[(row["build"], row["position"], int(n))] = c1 * r

    L = SHAPE["layers"]
    print(
        f"# {cpu_name()}, {os.cpu_count()} CPUs, {a.threads} thread(s); flash attention of the default model's "
        f"shape, medians of {a.rounds} x {a.repeats}, {a.layers} op(s) with K/V of their own per graph"
    )
    head = (
        f"{'pos':>5} {'n':>2} {'stock us':>9} {'patched us':>10} {'p/s':>5} {'x30 stock ms':>12} {'x30 patched ms':>14}"
    )
    if cost:
        head += f" {'share stock':>11} {'share patched':>13}"
    print(head)
    for pos in positions:
        for n in range(1, 9):
            s, p = med[("stock", pos, n)], med[("patched", pos, n)]
            line = f"{pos:5d} {n:2d} {s:9.1f} {p:10.1f} {p / s:5.2f} {L * s / 1e3:12.2f} {L * p / 1e3:14.2f}"
            if cost and ("stock", pos, n) in cost and ("patched", pos, n) in cost:
                line += (
                    f" {L * s / 1e3 / cost[('stock', pos, n)]:11.2f} {L * p / 1e3 / cost[('patched', pos, n)]:13.2f}"
                )
            print(line)


if __name__ == "__main__":
    main()
