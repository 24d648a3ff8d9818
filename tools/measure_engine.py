"""Before against after a change to the engine, in one run: pymtp bench (single stream) and
aggregate tokens/s of 1, 2, 4 and 8 concurrent streams through pymtp's server (batched steps).

    flock /tmp/pymtp-bench.lock python tools/measure_engine.py \
        --before SRC_DIR:LIBRARY --after SRC_DIR:LIBRARY [--model default] [--rounds 3]
        [--streams 1,2,4,8] [--tokens 64] [--threads 2] [--parallel 4] [--bench-args "..."]
        [--serve-args "--policy fixed --n-draft 3"]

Each side is a source tree (its src/ goes on PYTHONPATH) and a libpymtp.so. --paired N first
runs N pairs of generations in two long-lived worker processes, one per side, alternating
(single stream and a list of 4 prompts, greedy and T=0.8, drafts of 3 and plain; one decode
thread): the median of the per-pair after/before ratios of wall time and of the workers' CPU
time, which a loaded machine disturbs much less than wall time. The single-stream
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

import pymtp

sys.path.insert(0, str(Path(__file__).resolve().parent))


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


PAIRED_PROMPTS = [
    "def fibonacci(n):",
    "The history of the printing press",
    "import json\n\ndef load(path):",
    "class Stack:\n    def push(self, x):",
]
#: (name, prompts, temperature, speculative) of the paired cases
PAIRED_CASES = [
    (f"{n} {'1 stream' if k == 1 else f'{k} prompts'} T={t}", k, t, spec)
    for k in (1, 4)
    for t in (0.0, 0.8)
    for n, spec in (("mtp-3", {"n_draft": 3}), ("plain", False))
]


def worker(model: str, tokens: int) -> None:
    """Serve paired generations: each stdin line is a case index; answers 'wall cpu' seconds."""
    import time

    session = pymtp.load(model, n_ctx=1024, n_threads=1)
    for line in sys.stdin:
        _, k, temp, spec = PAIRED_CASES[int(line)]
        prompts = PAIRED_PROMPTS[:k] if k > 1 else PAIRED_PROMPTS[0]
        t0, c0 = time.perf_counter(), time.process_time()
        pymtp.generate(prompts, session, max_tokens=tokens, ignore_eos=True, temperature=temp, seed=1, speculative=spec)
        print(f"{time.perf_counter() - t0} {time.process_time() - c0}", flush=True)


def paired(sides: dict, args) -> dict:
    procs = {
        name: subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                "--model",
                args.model,
                "--tokens",
                str(args.tokens),
                "--before",
                "-",
                "--after",
                "-",
            ],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, env in sides.items()
    }

    def ask(name: str, case: int) -> tuple[float, float]:
        procs[name].stdin.write(f"{case}\n")
        procs[name].stdin.flush()
        wall, cpu = procs[name].stdout.readline().split()
        return float(wall), float(cpu)

    table = {}
    try:
        for case in range(len(PAIRED_CASES)):  # warm up every case once
            for name in procs:
                ask(name, case)
        ratios: dict[int, list[tuple[float, float]]] = {c: [] for c in range(len(PAIRED_CASES))}
        for i in range(args.paired):
            for case in range(len(PAIRED_CASES)):
                order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
                got = {name: ask(name, case) for name in order}
                ratios[case].append((got["after"][0] / got["before"][0], got["after"][1] / got["before"][1]))
        print(
            f"paired generations ({args.paired} pairs, {args.tokens} tokens, one thread): "
            "after/before time, median of the pairs (below 1: faster)"
        )
        for case, rs in ratios.items():
            wall, cpu = statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)
            table[PAIRED_CASES[case][0]] = {"wall": wall, "cpu": cpu, "pairs": rs}
            print(f"  {PAIRED_CASES[case][0]:24s} wall {wall:.3f}  cpu {cpu:.3f}", flush=True)
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait(30)
    return table


def main() -> None:
    if "--worker" in sys.argv:
        a = argparse.ArgumentParser()
        a.add_argument("--worker", action="store_true")
        a.add_argument("--model", default="default")
        a.add_argument("--tokens", type=int, default=64)
        a.add_argument("--before")
        a.add_argument("--after")
        w = a.parse_args()
        worker(w.model, w.tokens)
        return
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
    ap.add_argument("--skip-streams", action="store_true")
    ap.add_argument("--paired", type=int, default=0, metavar="N", help="N pairs of generations per case first")
    args = ap.parse_args()
    sides = {"before": side_env(args.before), "after": side_env(args.after)}
    report: dict = {"system": pymtp.system_info(), "args": vars(args)}
    if args.paired:
        report["paired"] = paired(sides, args)

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

    if args.skip_streams:
        print(json.dumps(report, indent=1, default=str))
        return
    # (here, not at the top: a --worker of an older tree must not need this tree's test helpers)
    from measure_streams import pymtp_call, round_, wait_up

    from pymtp_testing.hosts import free_port  # (tests/ is on the path: measure_streams)

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
