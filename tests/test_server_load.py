"""Load and faults: 16 concurrent clients against one ``pymtp serve`` process on 127.0.0.1.

Streams with random cancellations, long and short prompts, stop strings, n=2, sampled
requests, and bad requests (malformed JSON, an unknown model, invalid fields, no API
key) mixed in (pymtp.testing.server_load). Every greedy response that completes must
equal the same request answered alone; the run has a deadline (a hang fails it), the
server must still answer /health at the end, and its RSS may grow only a little. Run
with -s to see the figures. tools/load_test.py runs the same load on any model.
"""

from __future__ import annotations

import pytest
from conftest import CHATML
from prometheus_client.parser import text_string_to_metric_families

from pymtp.testing.server_load import Load, start_server

CLIENTS, PER_CLIENT = 16, 10
KEY = "load-test-key"
#: RSS the server may gain over a run after a warm-up run of the same size. Measured: about
#: 1 MiB (fixture model). A leak of what a request holds (its contexts' buffers, its stream, its
#: response) would show in 96 requests; the bound leaves room for the allocator's caprice.
MAX_RSS_GROWTH = 24 << 20


@pytest.fixture(scope="module")
def server(gguf):
    path = str(gguf("glm4moe", chat_template=CHATML))
    with start_server(["-m", path, "--threads", "1", "-c", "1024", "--model-name", "fixture"], api_key=KEY) as srv:
        yield srv
        if srv.proc.poll() is not None:
            print(srv.output()[-3000:])


def requests_by_outcome(load: Load) -> dict[str, float]:
    status, text = load.get("/metrics")
    assert status == 200
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "pymtp_requests_total":
                out[s.labels["outcome"]] = out.get(s.labels["outcome"], 0) + s.value
    return out


def test_concurrent_clients_with_cancellations_and_bad_requests(server):
    load = Load(server.url, model="fixture", api_key=KEY, max_tokens=32, timeout=60)
    refs = load.references()
    assert any(len(t[0]) > 0 for t in refs.values())
    warm = load.run(refs, clients=CLIENTS, per_client=PER_CLIENT, seed=1, deadline=120)   # warm-up
    rss_before = server.rss()
    before = requests_by_outcome(load)
    report = load.run(refs, clients=CLIENTS, per_client=PER_CLIENT, seed=2, deadline=120)
    rss_after = server.rss()
    after = requests_by_outcome(load)
    growth = rss_after - rss_before
    print(f"\nwarm-up: {warm.summary()}\nload:    {report.summary()}\n"
          f"server RSS {rss_before / 2**20:.1f} MiB -> {rss_after / 2**20:.1f} MiB ({growth / 2**20:+.1f} MiB)")

    for r in (warm, report):
        assert r.hung == 0, "clients still waiting at the deadline: the server hangs"
        assert not r.unexpected, r.unexpected[:5]
        assert not r.mismatches, r.mismatches[:5]
        assert r.requests == CLIENTS * PER_CLIENT
        assert r.completed > 0 and r.cancelled > 0 and r.expected_errors > 0    # the mix did happen
    assert len(report.by_case) >= len(load.cases) - 2
    assert load.get("/health")[0] == 200 and server.proc.poll() is None
    # the server's own count of the run agrees with the clients'
    d = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
    assert d.get("ok", 0) == report.completed
    assert d.get("client_error", 0) == report.expected_errors
    assert d.get("cancelled", 0) == report.cancelled
    assert d.get("server_error", 0) == 0
    assert growth < MAX_RSS_GROWTH, f"the server's RSS grew by {growth / 2**20:.1f} MiB over one run"
