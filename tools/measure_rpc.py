"""A model split over two hosts (ggml-rpc-servers in network namespaces), with added latency:
tokens/s of plain and speculative decoding, and bytes crossing the network per generated token.

    python tools/measure_rpc.py [--model default] [--delays 0,1,5] [--repeats 3] [--tokens 64]
                                [--out build/rpc.json]

Each host is a ggml-rpc-server in its own network namespace (pymtp_testing.hosts), holding half
the layers; the MTP block stays local (and, for comparison, remote). Latency is added by a
user-space proxy in front of each server (tc netem needs the kernel's sch_netem); bytes are
read from the veth pairs' counters. The same prompts run in one process for reference. Runs
are interleaved (plain, speculative) and medians reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # pymtp_testing: the checkout's test helpers

import pymtp
from pymtp_testing import hosts
from pymtp_testing.hosts import DelayProxy, Namespace, netns_unavailable

PROMPTS = ("def fibonacci(n):", "The history of the printing press", "import json\n\ndef load_config(path):")


def run(session, n_tokens: int, spaces, speculative) -> tuple[float, float, float]:
    """(tokens/s, bytes crossed per generated token, mean accepted per step) over PROMPTS."""
    secs = toks = 0.0
    b0 = sum(ns.bytes_crossed() for ns in spaces)
    steps = emitted = 0
    for p in PROMPTS:
        pymtp.generate(p, session, max_tokens=1)  # the prompt's cache: decode only is timed
        t0 = time.perf_counter()
        r = pymtp.generate(p, session, max_tokens=n_tokens, ignore_eos=True, speculative=speculative)
        secs += time.perf_counter() - t0
        toks += len(r.tokens)
        steps, emitted = steps + r.stats.n_steps, emitted + r.stats.n_emitted
    crossed = sum(ns.bytes_crossed() for ns in spaces) - b0
    return toks / secs, crossed / toks, emitted / max(1, steps)


def measure(session, args, spaces) -> dict:
    rows = {"plain": [], "mtp": []}
    for _ in range(args.repeats):
        for name, spec in (("plain", False), ("mtp", {"n_draft": args.n_draft})):
            rows[name].append(run(session, args.tokens, spaces, spec))
    out = {}
    for name, rs in rows.items():
        out[name] = {
            "tokens_per_s": statistics.median(r[0] for r in rs),
            "bytes_per_token": statistics.median(r[1] for r in rs),
            "tokens_per_step": statistics.median(r[2] for r in rs),
        }
    out["speedup"] = out["mtp"]["tokens_per_s"] / out["plain"]["tokens_per_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--delays", default="0,1,5", help="one-way added latency per host, ms")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--n-draft", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="threads of the local process")
    ap.add_argument("--out", type=Path, default=Path("build/rpc.json"))
    args = ap.parse_args()
    why = netns_unavailable()
    if why:
        raise SystemExit(f"measure_rpc needs network namespaces: {why}")
    path = pymtp.load(args.model, n_ctx=512).model.path
    binary = hosts.rpc_server_binary()
    result = {"model": str(path), "system": pymtp.system_info(), "tokens": args.tokens, "n_draft": args.n_draft}

    with pymtp.load(path, n_ctx=512, n_threads=args.threads) as local:
        result["one_process"] = measure(local, args, [])
        print("one process:", json.dumps(result["one_process"]), flush=True)

    with ExitStack() as stack:
        spaces = [stack.enter_context(Namespace()) for _ in range(2)]
        servers = [
            stack.enter_context(hosts.RPCServer(ns.ns_ip, 50052, prefix=ns.prefix, threads=1, binary=binary))
            for ns in spaces
        ]
        result["split"] = {}
        for delay in [float(d) for d in args.delays.split(",")]:
            for local_mtp in (True, False) if delay == 0 else (True,):
                with ExitStack() as inner:
                    if delay > 0:
                        proxies = [inner.enter_context(DelayProxy((s.host, s.port), delay / 1000)) for s in servers]
                        endpoints = [p.endpoint for p in proxies]
                    else:
                        endpoints = [s.endpoint for s in servers]
                    session = inner.enter_context(
                        pymtp.load(
                            path,
                            n_ctx=512,
                            n_threads=args.threads,
                            rpc_servers=endpoints,
                            tensor_split=[1, 1],
                            mtp_local=local_mtp,
                        )
                    )
                    key = f"{delay:g}ms" + ("" if local_mtp else " mtp-remote")
                    result["split"][key] = measure(session, args, spaces)
                    print(f"split over 2 hosts, +{key}:", json.dumps(result["split"][key]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
