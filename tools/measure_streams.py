"""Aggregate tokens/s at 1, 2, 4 and 8 concurrent streams: pymtp's server against llama.cpp's
llama-server (--parallel 4 --spec-type draft-mtp) on the same GGUF, in the same run.

    python tools/measure_streams.py [--model default] [--streams 1,2,4,8] [--tokens 64]
                                    [--repeats 3] [--threads 2] [--parallel 4] [--llama-server PATH]
                                    [--variants auto,plain,k2,k2-p0.75] [--no-llama-server]

Each stream asks for a greedy completion of --tokens tokens (end of text ignored) of its own
prompt; a round starts all streams at once and ends when the last one finishes: aggregate
tokens/s = tokens / wall time. The servers take turns (both idle while the other runs), and
the medians over repeats are reported with each server's acceptance of drafted tokens.
pymtp serves with --parallel (default 4, as llama-server's slots: batched steps); --parallel 1
measures one generation at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # pymtp_testing: the checkout's test helpers

import pymtp
from pymtp_testing.hosts import free_port

PROMPTS = [
    "def fibonacci(n):",
    "The history of the printing press",
    "import json\n\ndef load(path):",
    "class Stack:\n    def push(self, x):",
    "Once upon a time",
    "SELECT name FROM users WHERE",
    "def quicksort(xs):",
    "The three laws of motion are",
]


def wait_up(url: str, proc: subprocess.Popen) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def pymtp_call(port: int, prompt: str, n: int) -> tuple[int, int, int]:
    r = post(
        f"http://127.0.0.1:{port}/v1/completions",
        {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True},
    )
    ext = r["pymtp"]
    return r["usage"]["completion_tokens"], ext["n_drafted"], ext["n_accepted"]


def llama_call(port: int, prompt: str, n: int) -> tuple[int, int, int]:
    r = post(
        f"http://127.0.0.1:{port}/completion",
        {"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True, "cache_prompt": False},
    )
    t = r.get("timings", {})
    return r.get("tokens_predicted", t.get("predicted_n", 0)), t.get("draft_n", 0), t.get("draft_n_accepted", 0)


def round_(
    call, port: int, n_streams: int, tokens: int, which: list[int] | None = None
) -> tuple[float, float, list[float]]:
    """(aggregate tokens/s, acceptance, each stream's acceptance) of one round of n_streams
    concurrent completions."""
    prompts = [PROMPTS[i % len(PROMPTS)] for i in (which or range(n_streams))]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(n_streams) as ex:
        out = list(ex.map(lambda p: call(port, p, tokens), prompts))
    dt = time.perf_counter() - t0
    toks, drafted, accepted = (sum(x[i] for x in out) for i in range(3))
    return toks / dt, (accepted / drafted if drafted else 0.0), [a / d if d else 0.0 for _, d, a in out]


def variant_args(name: str) -> list[str]:
    """pymtp serve options of a --variants name (a tree after '@' is where the server's pymtp
    comes from: see variant_env)."""
    name = name.partition("@")[0]
    if name == "auto":
        return ["--policy", "auto"]
    if name == "plain":
        return ["--no-spec"]
    if name.startswith("k"):
        k, _, p = name[1:].partition("-p")
        return ["--n-draft", k] + (["--p-min", p] if p else [])
    raise SystemExit(f"unknown variant {name!r}: auto, plain, kN or kN-pP")


def variant_env(name: str) -> dict[str, str] | None:
    """The environment of a --variants name's server: NAME@TREE runs TREE/src's pymtp (another
    checkout, the same native library), so that two trees are compared in the same rounds."""
    tree = name.partition("@")[2]
    if not tree:
        return None
    if not (Path(tree) / "src" / "pymtp").is_dir():
        raise SystemExit(f"{tree}/src/pymtp is missing (variant {name!r})")
    return dict(os.environ, PYTHONPATH=str(Path(tree) / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4, help="pymtp serve --parallel (default 4)")
    ap.add_argument(
        "--p-min",
        type=float,
        default=None,
        help="pymtp serve --p-min (default: pymtp's, 0; llama-server drafts with its default 0.75)",
    )
    ap.add_argument("--llama-server", metavar="PATH")
    ap.add_argument("--no-llama-server", action="store_true", help="pymtp servers only")
    ap.add_argument(
        "--variants",
        default=None,
        metavar="NAMES",
        help="several pymtp servers, compared in the same rounds: auto (--policy auto), plain "
        "(--no-spec), kN (--n-draft N), kN-pP (--n-draft N --p-min P); e.g. auto,plain,k2,k2-p0.75 "
        "(default: one pymtp server with pymtp's defaults and --p-min); NAME@TREE: that server "
        "runs the pymtp of the checkout TREE (e.g. auto@/work/main)",
    )
    args = ap.parse_args()
    path = str(pymtp.load(args.model, n_ctx=512).model.path)
    if not args.llama_server and not args.no_llama_server:
        from pymtp.bench.llama_build import ensure_llama_tools

        args.llama_server = ensure_llama_tools(tools=("llama-server",))["bins"]["llama-server"]
    variants = {"pymtp": ["--p-min", str(args.p_min)] if args.p_min is not None else []}
    if args.variants:
        variants = {v: variant_args(v) for v in args.variants.split(",")}
    servers = []  # (name, call, port, process)
    for name, extra in variants.items():
        port = free_port()
        servers.append(
            (
                name,
                pymtp_call,
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
                        *extra,
                    ],
                    env=variant_env(name),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ),
            )
        )
    if not args.no_llama_server:
        l_port = free_port()
        servers.append(
            (
                "llama-server",
                llama_call,
                l_port,
                subprocess.Popen(
                    [
                        args.llama_server,
                        "-m",
                        path,
                        "--port",
                        str(l_port),
                        "-c",
                        "4096",
                        "--parallel",
                        "4",
                        "--spec-type",
                        "draft-mtp",
                        "-t",
                        str(args.threads),
                        "-tb",
                        str(args.threads),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ),
            )
        )
    procs = [s[3] for s in servers]
    p_port = servers[0][2]
    try:
        for _, _call, port, proc in servers:
            wait_up(f"http://127.0.0.1:{port}/health", proc)
        for _, call, port, _ in servers:  # warm up
            round_(call, port, 1, 8)
        rows = {}
        for _ in range(args.repeats):
            for n in [int(x) for x in args.streams.split(",")]:
                for name, call, port, _ in servers:
                    rows.setdefault((name, n), []).append(round_(call, port, n, args.tokens))
        table = {}
        for (name, n), v in sorted(rows.items()):
            tps, acc = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
            table[f"{name} {n}"] = {"tokens_per_s": tps, "acceptance": acc}
            print(
                f"{name:12s} {n} streams: {tps:7.1f} tok/s aggregate, acceptance {acc:.2f} "
                f"(runs: {', '.join(f'{x[0]:.1f}' for x in v)})",
                flush=True,
            )
        # each of the first 4 prompts alone, against its stream in the 4-stream rounds
        n4 = min(4, max(int(x) for x in args.streams.split(",")))
        alone = [[round_(pymtp_call, p_port, 1, args.tokens, [i])[1] for _ in range(args.repeats)] for i in range(n4)]
        together = [[r[2][i] for r in rows.get((servers[0][0], n4), [])] for i in range(n4)]
        per_stream = []
        for i in range(n4):
            a, t = statistics.median(alone[i]), statistics.median(together[i]) if together[i] else float("nan")
            per_stream.append({"prompt": PROMPTS[i], "alone": a, f"in {n4} streams": t})
            print(
                f"pymtp acceptance of prompt {i}: alone {a:.3f}, in {n4} streams {t:.3f} ({100 * (t - a):+.1f} points)"
            )
        print(
            json.dumps(
                {
                    "model": path,
                    "system": pymtp.system_info(),
                    "tokens": args.tokens,
                    "parallel": args.parallel,
                    "p_min": args.p_min,
                    "variants": list(variants),
                    "table": table,
                    "per_stream_acceptance": per_stream,
                },
                indent=1,
            )
        )
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


if __name__ == "__main__":
    main()
