"""Load and fault test of ``pymtp serve``, with its figures: requests per second and p50 / p99 latency at
1, 4 and 16 clients, the fault mix (streams closed after 1-6 events, n=3, bad and oversized
requests), the time from a client's close to its freed slot, and refusals under overload
(pymtp_testing.server_load).

Starts ``pymtp serve`` on 127.0.0.1 with the model given (the default model by default), or
drives a server already running (--url; --pid to read its RSS; no overload phase then). Exit
status 1 when anything unexpected happened (an unexpected status or error, a greedy output that
differs from the same request answered alone, a hung client, a traceback in the server's log).

    python tools/load_test.py                                  # the default model
    python tools/load_test.py -m model.gguf --threads 2 --levels 1,4,16 --requests 32
    python tools/load_test.py --url http://127.0.0.1:8000 --pid 12345 --api-key KEY
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # pymtp_testing: the checkout's test helpers

from pymtp_testing.server_load import Load, Report, log_problems, rss_bytes, start_server


def server_args(a, max_queue: int) -> list[str]:
    args = [
        "-c",
        str(a.n_ctx),
        "--model-name",
        "load-test",
        "--parallel",
        str(a.parallel),
        "--max-queue",
        str(max_queue),
        "--max-body",
        "1M",
    ]
    if a.model:
        args += ["-m", a.model]
    if a.threads:
        args += ["--threads", str(a.threads)]
    return args


def row(name: str, r: Report) -> dict:
    rps = r.completed / r.seconds if r.seconds else 0.0
    print(
        f"{name:>12} | {r.requests:>8} | {r.completed:>9} | {rps:>7.2f} | {r.percentile(50):>7.2f} | "
        f"{r.percentile(99):>7.2f} | {r.cancelled:>9} | {r.rejected:>7} | {r.expected_errors:>6} | "
        f"{len(r.unexpected) + len(r.mismatches) + r.hung:>10}",
        flush=True,
    )
    return {
        "name": name,
        "requests": r.requests,
        "completed": r.completed,
        "requests_per_second": rps,
        "p50_s": r.percentile(50),
        "p99_s": r.percentile(99),
        "cancelled": r.cancelled,
        "refused": r.rejected,
        "expected_errors": r.expected_errors,
        "unexpected": r.unexpected[:10],
        "mismatches": r.mismatches[:10],
        "hung": r.hung,
        "seconds": r.seconds,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("-m", "--model", help="GGUF to serve (default: pymtp's default model)")
    p.add_argument("--url", help="drive this running server instead of starting one (http://host:port)")
    p.add_argument("--pid", type=int, help="with --url: the server's process id, to read its RSS")
    p.add_argument(
        "--api-key",
        default="load-test-key",
        help="the key the started server requires (with --url: the server's key; '' for none)",
    )
    p.add_argument("--threads", type=int, help="the started server's CPU threads")
    p.add_argument("-c", "--n-ctx", type=int, default=4096, help="the started server's context per slot (default 4096)")
    p.add_argument("--parallel", type=int, default=4, help="the started server's --parallel (default 4)")
    p.add_argument("--levels", default="1,4,16", help="client counts of the throughput runs (default 1,4,16)")
    p.add_argument(
        "--requests",
        type=int,
        default=32,
        help="greedy requests of each throughput run, shared by its clients (default 32)",
    )
    p.add_argument("--clients", type=int, default=16, help="clients of the fault mix (default 16)")
    p.add_argument("--fault-requests", type=int, default=6, help="requests per client of the fault mix (default 6)")
    p.add_argument("--max-tokens", type=int, default=32, help="max_tokens of the requests (default 32)")
    p.add_argument(
        "--long-repeats",
        type=int,
        default=8,
        help="the long prompt is a 190-character paragraph this many times (default 8)",
    )
    p.add_argument("--no-chat", action="store_true", help="no chat requests (a model without a chat template)")
    p.add_argument(
        "--close-repeats", type=int, default=10, help="closed streams timed to their freed slot (default 10)"
    )
    p.add_argument(
        "--overload-queue",
        type=int,
        default=4,
        help="the overload phase's server: --max-queue this, 2 x (parallel + it) clients (default 4; "
        "0: no overload phase)",
    )
    p.add_argument("--seed", type=int, default=0, help="the clients' random seed (default 0)")
    p.add_argument("--timeout", type=float, default=600, help="seconds a request may take (default 600)")
    p.add_argument("--deadline", type=float, default=3600, help="seconds a run may take (default 3600)")
    p.add_argument("--json", action="store_true", help="also print the figures as JSON")
    a = p.parse_args(argv)

    key = a.api_key or None
    if a.url:
        server, url, pid = None, a.url, a.pid
    else:
        print("starting pymtp serve", *server_args(a, 64), flush=True)
        server = start_server(server_args(a, 64), api_key=key, startup=900)
        url, pid = server.url, server.pid
    figures: dict = {"runs": []}
    ok = True
    try:
        probe = Load(url, api_key=key, timeout=a.timeout)
        status, text = probe.get("/v1/models")
        if status != 200:
            print(f"GET /v1/models: {status} {text[:300]}", file=sys.stderr)
            return 1
        model = json.loads(text)["data"][0]["id"]
        load = Load(
            url,
            model=model,
            api_key=key,
            max_tokens=a.max_tokens,
            long_repeats=a.long_repeats,
            timeout=a.timeout,
            chat=not a.no_chat,
            max_body=server.max_body if server else None,
        )
        try:
            refs = load.references()
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(
            f"{url}: model {model}, {len(load.cases)} kinds of request, {len(refs)} greedy references "
            "taken one at a time",
            flush=True,
        )
        rss0 = rss_bytes(pid) if pid else None
        print(
            f"\n{'run':>12} | requests | completed |   req/s | p50 (s) | p99 (s) | cancelled | refused | "
            f"4xx ok | unexpected\n" + "-" * 112,
            flush=True,
        )
        greedy = [c for c in load.cases if c.greedy]
        for n in [int(x) for x in a.levels.split(",")]:
            r = load.run(
                refs, clients=n, per_client=max(1, a.requests // n), seed=a.seed + n, deadline=a.deadline, cases=greedy
            )
            figures["runs"].append(row(f"{n} clients", r))
            ok &= r.ok and r.rejected == 0
        r = load.run(refs, clients=a.clients, per_client=a.fault_requests, seed=a.seed, deadline=a.deadline)
        figures["runs"].append(row("fault mix", r))
        ok &= r.ok
        closes = load.close_to_free(a.close_repeats)
        figures["close_to_free_ms"] = {"median": statistics.median(closes) * 1e3, "max": max(closes) * 1e3}
        m = load.metrics()
        figures["server_cancel"] = {
            "cancelled_generations": m["pymtp_generations_cancelled_total"],
            "steps_max": m["pymtp_cancel_steps_max"],
            "seconds_max": m["pymtp_cancel_seconds_max"],
        }
        rss1 = rss_bytes(pid) if pid else None
        if server is not None and a.overload_queue > 0:
            clients = 2 * (a.parallel + a.overload_queue)
            with start_server(server_args(a, a.overload_queue), api_key=key, startup=900) as busy:
                bl = Load(
                    busy.url,
                    model="load-test",
                    api_key=key,
                    max_tokens=a.max_tokens,
                    long_repeats=a.long_repeats,
                    timeout=a.timeout,
                    chat=not a.no_chat,
                )
                r = bl.run(
                    refs,
                    clients=clients,
                    per_client=max(2, a.requests // clients),
                    seed=a.seed + 99,
                    deadline=a.deadline,
                    cases=[c for c in bl.cases if c.greedy],
                )
                figures["runs"].append(row(f"overload {clients}", r))
                ok &= r.ok and r.rejected > 0
                problems = log_problems(busy.output())
        else:
            problems = []
        health = load.get("/health")[0]
        ok &= health == 200
        if server is not None:
            problems += log_problems(server.output())
        ok &= not problems
        print(
            f"\nclose to freed slot (client side, {len(closes)} closes on an idle server): median "
            f"{figures['close_to_free_ms']['median']:.1f} ms, max {figures['close_to_free_ms']['max']:.1f} ms; "
            f"server side: max {m['pymtp_cancel_seconds_max'] * 1e3:.1f} ms, "
            f"{m['pymtp_cancel_steps_max']:.0f} step(s) after a cancel at most"
        )
        if rss0 is not None:
            print(
                f"server RSS: {rss0 / 2**20:.1f} MiB before, {rss1 / 2**20:.1f} MiB after "
                f"({(rss1 - rss0) / 2**20:+.1f} MiB)"
            )
        print(f"/health after the runs: {health}; error or traceback lines in the logs: {len(problems)}")
        for run in figures["runs"]:
            for line in (run["unexpected"] + run["mismatches"])[:5]:
                print("  ", run["name"], line[:300])
        for line in problems[:10]:
            print("   log:", line[:300])
        if a.json:
            figures.update(rss_before=rss0, rss_after=rss1, health=health, log_problems=problems[:20])
            print(json.dumps(figures))
        return 0 if ok else 1
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
