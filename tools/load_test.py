"""Load and fault test of ``pymtp serve``: concurrent streaming clients with cancellations, long and
short prompts, stop strings, n=2, sampled requests and bad requests (pymtp.testing.server_load).

Starts ``pymtp serve`` on 127.0.0.1 with the model given (the default model by default), or
drives a server already running (--url; --pid to read its RSS). Prints the requests,
completions, cancellations, errors (expected: the bad requests; unexpected: anything else),
greedy mismatches against each request answered alone, and the server's RSS before and after.
Exit status 1 when anything unexpected happened.

    python tools/load_test.py                                  # the default model, 16 clients
    python tools/load_test.py -m model.gguf --threads 4 --clients 16 --requests 10
    python tools/load_test.py --url http://127.0.0.1:8000 --pid 12345 --api-key KEY
"""

from __future__ import annotations

import argparse
import json
import sys

from pymtp.testing.server_load import Load, rss_bytes, start_server


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", help="GGUF to serve (default: pymtp's default model)")
    p.add_argument("--url", help="drive this running server instead of starting one (http://host:port)")
    p.add_argument("--pid", type=int, help="with --url: the server's process id, to read its RSS")
    p.add_argument("--api-key", default="load-test-key",
                   help="the key the started server requires (with --url: the server's key; '' for none)")
    p.add_argument("--threads", type=int, help="the started server's CPU threads")
    p.add_argument("-c", "--n-ctx", type=int, default=4096, help="the started server's context (default 4096)")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    p.add_argument("--requests", type=int, default=10, help="requests per client (default 10)")
    p.add_argument("--max-tokens", type=int, default=32, help="max_tokens of the requests (default 32)")
    p.add_argument("--long-repeats", type=int, default=8,
                   help="the long prompt is a 190-character paragraph this many times (default 8)")
    p.add_argument("--no-chat", action="store_true", help="no chat requests (a model without a chat template)")
    p.add_argument("--warmup", action="store_true", help="run the load once before the measured run")
    p.add_argument("--seed", type=int, default=0, help="the clients' random seed (default 0)")
    p.add_argument("--timeout", type=float, default=600, help="seconds a request may take (default 600)")
    p.add_argument("--deadline", type=float, default=3600, help="seconds the whole run may take (default 3600)")
    p.add_argument("--json", action="store_true", help="also print the report as JSON")
    a = p.parse_args(argv)

    key = a.api_key or None
    if a.url:
        server, url, pid = None, a.url, a.pid
    else:
        args = ["-c", str(a.n_ctx), "--model-name", "load-test"]
        if a.model:
            args += ["-m", a.model]
        if a.threads:
            args += ["--threads", str(a.threads)]
        print("starting pymtp serve", *args, flush=True)
        server = start_server(args, api_key=key, startup=900)
        url, pid = server.url, server.pid
    try:
        probe = Load(url, api_key=key, timeout=a.timeout)
        status, text = probe.get("/v1/models")
        if status != 200:
            print(f"GET /v1/models: {status} {text[:300]}", file=sys.stderr)
            return 1
        model = json.loads(text)["data"][0]["id"]
        load = Load(url, model=model, api_key=key, max_tokens=a.max_tokens, long_repeats=a.long_repeats,
                    timeout=a.timeout, chat=not a.no_chat)
        try:
            refs = load.references()
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"{url}: model {model or '(omitted)'}, {len(load.cases)} kinds of request, "
              f"{len(refs)} greedy references taken one at a time", flush=True)
        if a.warmup:
            print("warm-up:", load.run(refs, clients=a.clients, per_client=a.requests, seed=a.seed + 1,
                                       deadline=a.deadline).summary(), flush=True)
        rss0 = rss_bytes(pid) if pid else None
        report = load.run(refs, clients=a.clients, per_client=a.requests, seed=a.seed, deadline=a.deadline)
        rss1 = rss_bytes(pid) if pid else None
        health = load.get("/health")[0]
        print(report.summary())
        if rss0 is not None:
            print(f"server RSS: {rss0 / 2**20:.1f} MiB before, {rss1 / 2**20:.1f} MiB after "
                  f"({(rss1 - rss0) / 2**20:+.1f} MiB)")
        print(f"/health after the run: {health}")
        for line in (report.unexpected + report.mismatches)[:10]:
            print("  ", line[:300])
        if a.json:
            print(json.dumps({"requests": report.requests, "completed": report.completed,
                              "cancelled": report.cancelled, "expected_errors": report.expected_errors,
                              "unexpected_errors": len(report.unexpected), "mismatches": len(report.mismatches),
                              "hung": report.hung, "seconds": report.seconds, "rss_before": rss0,
                              "rss_after": rss1, "by_case": report.by_case}))
        return 0 if report.ok and health == 200 else 1
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
