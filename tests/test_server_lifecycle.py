"""``pymtp serve`` as a process a deployment runs: SIGTERM during a long generation, a stderr
nobody reads, disconnects of non-streamed requests, the request timeout. 127.0.0.1 only; the
fixture model (about 1000 tokens/s on one thread)."""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import random
import signal
import termios
import threading
import time

import pytest
from conftest import CHATML

from pymtp_testing.server_load import Case, Load, log_problems, start_server

F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032


@pytest.fixture(scope="module")
def path(gguf):
    return str(gguf("glm4moe", chat_template=CHATML))


def base_args(path: str, *more: str) -> list[str]:
    return ["-m", path, "--threads", "1", "-c", "4096", "--model-name", "fixture", *more]


class Stream:
    """A streamed completion read in a thread: its events, how it ended, and when."""

    def __init__(self, url: str, body: dict) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.conn.request(
            "POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        self.resp = self.conn.getresponse()
        self.events: list[dict] = []
        self.end: str | None = None  # "done" ([DONE]), "eof" (closed without it), or the exception
        self.first = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while line := self.resp.readline():
                if line.startswith(b"data: [DONE]"):
                    self.end = "done"
                    return
                if line.startswith(b"data: "):
                    self.events.append(json.loads(line[6:]))
                    self.first.set()
            self.end = "eof"
        except Exception as e:  # noqa: BLE001 - the test reads it
            self.end = repr(e)
        finally:
            self.first.set()

    def text(self) -> str:
        return "".join(c.get("text", "") for e in self.events for c in e.get("choices", ()))


def refused(url: str) -> bool:
    """Whether a new request is refused: no connection, or a 503."""
    try:
        status, _ = Load(url, timeout=5).get("/v1/models")
    except (ConnectionError, OSError):
        return True
    return status == 503


def test_sigterm_lets_the_generation_in_flight_finish(path):
    """SIGTERM during a long generation: new requests are refused at once, the stream in flight
    runs to its end ([DONE], every token), the process exits 0 with its worker ended and the model
    closed, and the log shows no error."""
    with start_server(base_args(path, "--parallel", "2", "--shutdown-timeout", "60")) as srv:
        load = Load(srv.url, model="fixture", timeout=30)
        whole = load.request(Case("x", "/v1/completions", {"prompt": "The", "max_tokens": 1500, "ignore_eos": True}))
        s = Stream(srv.url, {"prompt": "The", "max_tokens": 1500, "ignore_eos": True, "stream": True})
        assert s.first.wait(30) and s.end is None, "the generation ended before the signal: make it longer"
        srv.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        while not refused(srv.url):
            assert time.monotonic() - t0 < 5, "new requests are still taken after SIGTERM"
            time.sleep(0.05)
        assert s.end is None, "the stream in flight ended before it could be seen refusing others"
        assert srv.proc.wait(60) == 0
        s.thread.join(10)
        assert s.end == "done" and s.text() == whole.texts[0]
        log = srv.output()
        assert log_problems(log) == [], log_problems(log)
        assert "stopped: the generation worker has ended, the model is closed, no thread is left" in log


def test_sigterm_ends_what_outlives_the_shutdown_timeout(path):
    """What still runs at --shutdown-timeout ends cleanly: the stream gets an error event
    (shutting_down) and [DONE]; a waiting non-streamed request a 503; exit 0, nothing logged as an
    error."""
    args = base_args(path, "--parallel", "1", "--shutdown-timeout", "1", "-c", "32768")
    with start_server(args) as srv:
        s = Stream(srv.url, {"prompt": "The", "max_tokens": 30000, "ignore_eos": True, "stream": True})
        assert s.first.wait(30)
        waiting: list = []
        t = threading.Thread(
            target=lambda: waiting.append(
                Load(srv.url, timeout=60).request(Case("w", "/v1/completions", {"prompt": "hi", "max_tokens": 4}))
            )
        )
        t.start()
        time.sleep(0.3)  # queued behind the stream (one slot)
        srv.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert srv.proc.wait(30) == 0
        assert time.monotonic() - t0 < 15
        s.thread.join(10)
        t.join(10)
        assert s.end == "done" and s.text(), s.end
        assert s.events[-1]["error"]["code"] == "shutting_down"
        assert waiting[0].status == 503 and waiting[0].code == "shutting_down"
        log = srv.output()
        assert log_problems(log) == [], log_problems(log)


def test_a_stderr_nobody_reads_does_not_stop_the_server(path):
    """stderr is a pipe that nobody reads: once it is full the server drops log lines instead of
    blocking, so /health, completions and closed streams all go on; SIGTERM still exits 0."""
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
    size = fcntl.fcntl(r, F_GETPIPE_SZ)
    try:
        with start_server(base_args(path), stderr=w) as srv:
            os.close(w)
            w = -1
            load = Load(srv.url, model="fixture", timeout=10)
            unknown = Case("u", "/v1/completions", {"model": "nope", "prompt": "hi", "max_tokens": 2}, expect=404)
            cancel = Case(
                "c",
                "/v1/completions",
                {"prompt": "The", "max_tokens": 2000, "ignore_eos": True, "stream": True},
                cancel=True,
            )
            rng = random.Random(0)
            for i in range(3 * size // 256):  # two access lines (~130 bytes each) a round
                assert load.request(cancel, rng).kind == "cancelled"
                assert load.request(unknown).status == 404
                assert load.get("/health")[0] == 200
                if i == 2 * size // 256:
                    buf = bytearray(4)
                    fcntl.ioctl(r, termios.FIONREAD, buf)
                    assert int.from_bytes(buf, "little") > size - 512, "the pipe is not full: the test tests nothing"
            done = load.request(Case("d", "/v1/completions", {"prompt": "hi", "max_tokens": 8}))
            assert done.kind == "done" and done.status == 200
            assert srv.stop(30) == 0
        os.set_blocking(r, False)
        out = b""
        while True:
            try:
                chunk = os.read(r, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            out += chunk
        assert log_problems(out.decode(errors="replace")) == []
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_a_dropped_non_streamed_request_frees_its_slot(path):
    """A client that drops its connection before a whole (non-streamed) response cancels the
    generation: the slot is free before the next step, the request counts as cancelled, and the
    log has its one access line and nothing else about it."""
    with start_server(base_args(path, "--parallel", "2")) as srv:
        load = Load(srv.url, model="fixture", timeout=30)
        host, port = srv.url.removeprefix("http://").split(":")
        for _ in range(3):
            before = load.metrics()
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.request(
                "POST",
                "/v1/completions",
                body=json.dumps({"prompt": "The", "max_tokens": 3000, "ignore_eos": True}),
                headers={"Content-Type": "application/json"},
            )
            t0 = time.monotonic()
            while load.metrics()["pymtp_generations_running"] < 1:
                assert time.monotonic() - t0 < 10
                time.sleep(0.01)
            conn.close()
            while load.metrics()["pymtp_generations_cancelled_total"] == before["pymtp_generations_cancelled_total"]:
                assert time.monotonic() - t0 < 10, "the dropped request's generation goes on"
                time.sleep(0.005)
        m = load.metrics()
        assert m["pymtp_cancel_steps_max"] <= 1 and m["pymtp_generations_running"] == 0
        assert m['pymtp_requests_total{endpoint="/v1/completions",outcome="cancelled"}'] == 3
        t0 = time.monotonic()
        while srv.output().count(" cancelled ") < 3 and time.monotonic() - t0 < 5:
            time.sleep(0.05)  # the log writer thread's lag
        log = srv.output()
        assert log_problems(log) == [] and log.count(" cancelled ") == 3


@pytest.mark.parametrize("parallel", ["1", "2"])
def test_the_request_timeout_ends_a_generation_with_length(path, parallel):
    """--request-timeout: a generation still running at its deadline ends with finish_reason
    "length" (pymtp's finish_reason "timeout"), streamed or not; the text it has is kept."""
    with start_server(base_args(path, "--parallel", parallel, "--request-timeout", "0.5", "-c", "32768")) as srv:
        load = Load(srv.url, timeout=30)
        body = {"prompt": "The", "max_tokens": 30000, "ignore_eos": True}
        t0 = time.monotonic()
        status, text = _post(srv.url, body)
        assert status == 200 and time.monotonic() - t0 < 5
        out = json.loads(text)
        assert out["choices"][0]["finish_reason"] == "length" and out["pymtp"]["finish_reason"] == "timeout"
        assert 0 < out["usage"]["completion_tokens"] < 30000
        s = Stream(srv.url, {**body, "stream": True})
        s.thread.join(10)
        assert s.end == "done"
        finals = [c for e in s.events for c in e.get("choices", ()) if c.get("finish_reason")]
        assert [c["finish_reason"] for c in finals] == ["length"]
        assert load.metrics()["pymtp_generations_timed_out_total"] == 2
        assert log_problems(srv.output()) == []


def _post(url: str, body: dict) -> tuple[int, str]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()
