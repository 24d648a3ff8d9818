"""Load and faults: 16 concurrent clients against one ``pymtp serve`` process on 127.0.0.1, batched
(``--parallel 4``) and one at a time (``--parallel 1``), with the server's log captured.

Streams closed after 1-6 events (n=3 ones too), long and short prompts, stop strings, n=3,
completions and chats, sampled requests, bad requests (malformed JSON, an oversized body, an
unknown model, invalid fields, no API key) and, with a queue of 4, requests beyond it
(pymtp_testing.server_load). Every greedy response that completes equals the same request
answered alone; a refused request got 503 with Retry-After; the server's count of the run
agrees with the clients'; every closed stream's slot was freed before the next step; the log
has one access line per request and no traceback or error; the RSS stays put; the run has a
deadline (a hang fails it). Run with -s to see the figures. tools/load_test.py runs the same
load on any model.
"""

from __future__ import annotations

import time

import pytest
from conftest import CHATML

from pymtp_testing.server_load import Load, log_problems, start_server

CLIENTS, PER_CLIENT = 16, 10
KEY = "load-test-key"
MAX_QUEUE = 4
#: RSS the server may gain over a run after a warm-up run of the same size. Measured: about
#: 1 MiB (fixture model). A leak of what a request holds (its contexts' buffers, its stream, its
#: response) would show in 160 requests; the bound leaves room for the allocator's caprice.
MAX_RSS_GROWTH = 24 << 20


@pytest.fixture(scope="module", params=[4, 1], ids=["batched", "one-at-a-time"])
def server(gguf, request):
    path = str(gguf("glm4moe", chat_template=CHATML))
    args = [
        "-m",
        path,
        "--threads",
        "1",
        "-c",
        "1024",
        "--model-name",
        "fixture",
        "--parallel",
        str(request.param),
        "--max-queue",
        str(MAX_QUEUE),
        "--max-body",
        "64K",
    ]
    with start_server(args, api_key=KEY) as srv:
        yield srv
        if srv.proc.poll() is not None:
            print(srv.output()[-3000:])


def requests_by_outcome(load: Load) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in load.metrics().items():
        if name.startswith("pymtp_requests_total{"):
            outcome = name.split('outcome="')[1].split('"')[0]
            out[outcome] = out.get(outcome, 0) + value
    return out


def access_lines(log: str) -> int:
    return sum('"POST /v1/' in line for line in log.splitlines())


def settled(server, load: Load) -> int:
    """Wait until the server has finished every request (the last closed streams are noticed a
    moment after their clients moved on) and written their access lines; their number."""
    end = time.monotonic() + 30
    while load.metrics()["pymtp_requests_in_flight"] > 0:
        assert time.monotonic() < end, "requests stay in flight after every client finished"
        time.sleep(0.01)
    n = access_lines(server.output())
    while True:
        time.sleep(0.2)  # the log writer thread's lag
        again = access_lines(server.output())
        if again == n:
            return n
        n = again


def test_concurrent_clients_with_cancellations_overload_and_bad_requests(server):
    load = Load(server.url, model="fixture", api_key=KEY, max_tokens=32, timeout=60, max_body=server.max_body)
    refs = load.references()
    assert any(len(t[0]) > 0 for t in refs.values())
    warm = load.run(refs, clients=CLIENTS, per_client=PER_CLIENT, seed=1, deadline=120)  # warm-up
    lines0 = settled(server, load)
    rss_before = server.rss()
    before, m0 = requests_by_outcome(load), load.metrics()
    report = load.run(refs, clients=CLIENTS, per_client=PER_CLIENT, seed=2, deadline=120)
    lines1 = settled(server, load)
    rss_after = server.rss()
    after, m1 = requests_by_outcome(load), load.metrics()
    growth = rss_after - rss_before
    print(
        f"\nwarm-up: {warm.summary()}\nload:    {report.summary()}\n"
        f"server RSS {rss_before / 2**20:.1f} MiB -> {rss_after / 2**20:.1f} MiB ({growth / 2**20:+.1f} MiB); "
        f"cancel to free slot: max {m1['pymtp_cancel_seconds_max'] * 1e3:.1f} ms, "
        f"{m1['pymtp_cancel_steps_max']:.0f} steps"
    )

    for r in (warm, report):
        assert r.hung == 0, "clients still waiting at the deadline: the server hangs"
        assert not r.unexpected, r.unexpected[:5]
        assert not r.mismatches, r.mismatches[:5]
        assert r.requests == CLIENTS * PER_CLIENT
        assert r.completed > 0 and r.cancelled > 0 and r.expected_errors > 0  # the mix did happen
    assert warm.rejected + report.rejected > 0, "the queue bound was never reached: overload is untested"
    assert len(report.by_case) >= len(load.cases) - 3
    assert load.get("/health")[0] == 200 and server.proc.poll() is None

    # the server's own count of the run agrees with the clients'
    d = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
    assert d.get("ok", 0) == report.completed
    assert d.get("client_error", 0) == report.expected_errors
    assert d.get("cancelled", 0) == report.cancelled
    assert d.get("rejected", 0) == report.rejected
    assert d.get("server_error", 0) == 0
    # every closed stream stopped its generations (n=3: all three), each slot freed before the next step
    cancelled = m1["pymtp_generations_cancelled_total"] - m0["pymtp_generations_cancelled_total"]
    assert cancelled >= report.cancelled
    assert m1["pymtp_cancel_steps_max"] <= 1
    for gauge in ("pymtp_generations_running", "pymtp_queue_depth", "pymtp_requests_in_flight"):
        assert m1[gauge] == 0, gauge  # nothing left behind

    log = server.output()
    assert log_problems(log) == [], log_problems(log)[:5]  # client behaviour is no error
    assert lines1 - lines0 == report.requests  # one access line per request
    assert growth < MAX_RSS_GROWTH, f"the server's RSS grew by {growth / 2**20:.1f} MiB over one run"
