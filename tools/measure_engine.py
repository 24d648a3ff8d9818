"""Before against after a change to the engine, in one run: pymtp bench (single stream) and
aggregate tokens/s of 1, 2, 4 and 8 concurrent streams through pymtp's server (batched steps).

    flock /tmp/pymtp-bench.lock python tools/measure_engine.py \
        --before SRC_DIR:LIBRARY --after SRC_DIR:LIBRARY [--model default] [--rounds 3]
        [--streams 1,2,4,8] [--tokens 64] [--threads 2] [--parallel 4] [--bench-args "..."]
        [--serve-args "--policy fixed --n-draft 3"]

Each side is a source tree (its src/ goes on PYTHONPATH) and a libpymtp.so. The single-stream
part runs `pymtp bench` (no llama.cpp, greedy and T=0.8) alternately for the two sides,
--rounds times each, and compares each variant's median tokens/s over all runs. The streams
part starts one server per side and alternates them round by round (tools/measure_streams.py's
rounds: every stream a greedy completion of --tokens tokens of its own prompt). Prints the
medians and after/before ratios, then the raw data as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_streams import pymtp_call, round_, wait_up  # noqa: E402

import pymtp  # noqa: E402
from pymtp_testing.hosts import free_port  # noqa: E402  (tests/ is on the path: measure_streams)


def side_env(spec: str) -> dict[str, str]:
    src, _, lib = spec.partition(":")
    env = dict(os.environ, PYTHONPATH=str(Path(src) / "src"), PYMTP_LIBRARY=lib)
    env.pop("PYMTP_HEADER", None)
    header = Path(lib).with_name("pymtp.h")
    if not header.exists():
        raise SystemExit(f"{header} is missing: the library's header must sit beside it")
    return env


def bench_once(env: dict, args, out: Path) -> dict[str, list[float]]:
    """tokens/s of each (variant, sampling) of one pymtp bench run."""
    cmd = [
        sys.executable,
        "-m",
        "pymtp",
        "bench",
        "--model",
        args.model,
        "--no-llama-cpp",
        "--no-profile",
        "--no-plot",
        "--out",
        str(out),
        *args.bench_args.split(),
    ]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    d = json.loads((out / "bench.json").read_text())
    got: dict[str, list[float]] = {}
    for r in d["runs"]:
        if not r["warmup"] and r["ok"]:
            got.setdefault(f"{r['variant']} {r['sampling']}", []).append(r["tps"])
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, metavar="SRC:LIB")
    ap.add_argument("--after", required=True, metavar="SRC:LIB")
    ap.add_argument("--model", default="default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--bench-args", default="--drafts 3 --temps 0,0.8 --n-prompts 3 --max-tokens 64 --repeats 1")
    ap.add_argument(
        "--serve-args",
        default="--policy fixed --n-draft 3",
        help="pymtp serve options of both servers (default: drafts of 3 every step)",
    )
    ap.add_argument("--skip-bench", action="store_true")
    args = ap.parse_args()
    sides = {"before": side_env(args.before), "after": side_env(args.after)}
    report: dict = {"system": pymtp.system_info(), "args": vars(args)}

    if not args.skip_bench:
        runs: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.rounds):
                for name, env in sides.items():
                    for key, tps in bench_once(env, args, Path(tmp) / f"{name}{i}").items():
                        runs[name].setdefault(key, []).extend(tps)
        print("pymtp bench, single stream (median tokens/s over all prompts and rounds):")
        table = {}
        for key in sorted(runs["before"]):
            b, a = statistics.median(runs["before"][key]), statistics.median(runs["after"].get(key, [0.0]))
            table[key] = {"before": b, "after": a, "ratio": a / b}
            print(f"  {key:28s} before {b:7.1f}  after {a:7.1f}  {a / b:.3f}x", flush=True)
        report["bench"] = {"table": table, "runs": runs}

    path = str(pymtp.load(args.model, n_ctx=512).model.path)
    servers = {}
    try:
        for name, env in sides.items():
            port = free_port()
            servers[name] = (
                port,
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "pymtp",
                        "serve",
                        "-m",
                        path,
                        "--port",
                        str(port),
                        "-c",
                        "4096",
                        "--threads",
                        str(args.threads),
                        "--parallel",
                        str(args.parallel),
                        "-q",
                        *args.serve_args.split(),
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ),
            )
        for port, proc in servers.values():
            wait_up(f"http://127.0.0.1:{port}/health", proc)
            round_(pymtp_call, port, 1, 8)  # warm up
        rows: dict[tuple[str, int], list] = {}
        for _ in range(args.rounds):
            for n in [int(x) for x in args.streams.split(",")]:
                for name, (port, _) in servers.items():
                    rows.setdefault((name, n), []).append(round_(pymtp_call, port, n, args.tokens))
        print(f"server --parallel {args.parallel}, aggregate tokens/s (median of {args.rounds} rounds):")
        table = {}
        for n in [int(x) for x in args.streams.split(",")]:
            b = statistics.median(x[0] for x in rows[("before", n)])
            a = statistics.median(x[0] for x in rows[("after", n)])
            acc = [statistics.median(x[1] for x in rows[(s, n)]) for s in ("before", "after")]
            table[n] = {"before": b, "after": a, "ratio": a / b, "acceptance": acc}
            print(
                f"  {n} streams: before {b:7.1f}  after {a:7.1f}  {a / b:.3f}x  "
                f"(acceptance {acc[0]:.2f} / {acc[1]:.2f})",
                flush=True,
            )
        report["streams"] = {"table": table, "runs": {f"{k[0]} {k[1]}": [x[0] for x in v] for k, v in rows.items()}}
    finally:
        for _, proc in servers.values():
            proc.terminate()
            proc.wait(10)
    print(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
