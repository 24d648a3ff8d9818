"""A load and fault run against a pymtp server: concurrent streaming clients, cancellations, bad requests.

Used by ``tests/test_server_load.py`` (on a fixture model) and ``tools/load_test.py`` (on any
model). Standard library only (http.client, threads), so it measures the server and not a
client library::

    from pymtp_testing.server_load import Load, start_server
    with start_server(["-m", "model.gguf", "--threads", "1", "--max-queue", "4"]) as srv:
        load = Load(srv.url, api_key=srv.api_key, max_body=srv.max_body)
        refs = load.references()              # each greedy case alone, not streamed
        report = load.run(refs, clients=16, per_client=6)
        print(report.summary(), log_problems(srv.output()))

Each client runs a bounded number of requests drawn (seeded) from ``Load.cases``: greedy
completions and chats, streamed or not, short and long prompts, stop strings, n=3, sampled
ones (checked for status only), streams the client closes after 1-6 events, and bad requests
(malformed JSON, an oversized body, an unknown model, an invalid field, a missing API key) that
must get their 4xx. Any request may instead be refused with 503 when the server's queue is full:
that must carry Retry-After and OpenAI's error body. A greedy response that completes must
equal the request's reference text; every socket has a timeout and the run a deadline, so a hung
server fails the run instead of hanging it.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from .hosts import free_port

__all__ = ["Case", "Load", "Outcome", "Report", "Server", "log_problems", "metric", "rss_bytes", "start_server"]

LONG_TEXT = (
    "The quick brown fox jumps over the lazy dog while the committee reviews the quarterly report. "
    "Meanwhile, in the server room, the fans hum and the logs scroll past without end. "
)


@dataclass
class Case:
    """One kind of request. expect: the status it must get; greedy: its completed text is compared
    with the reference; cancel: the client closes the stream after a few events; auth: it sends
    the API key (when there is one)."""

    name: str
    path: str
    body: dict[str, Any] | bytes
    expect: int = 200
    greedy: bool = False
    cancel: bool = False
    auth: bool = True
    weight: int = 1  # how often it is drawn, relative to the others

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))


@dataclass
class Outcome:
    """What one request got. kind: "done", "cancelled" (the client closed the stream), "rejected:
    <message>" (a status other than 200) or "error: ..." (no proper answer); texts: {choice index:
    text} of a 200 that completed; retry_after: the Retry-After header."""

    kind: str
    status: int
    texts: dict[int, str] | None = None
    seconds: float = 0.0
    retry_after: str | None = None
    code: str | None = None  # the error body's code


@dataclass
class Report:
    """What a run did. unexpected: requests that got another status or an error event;
    mismatches: greedy responses that differ from their reference; hung: clients that
    did not finish by the deadline; rejected: requests refused with 503 and Retry-After (a full
    queue); latencies: seconds of each completed request."""

    requests: int = 0
    completed: int = 0
    cancelled: int = 0
    rejected: int = 0
    expected_errors: int = 0
    unexpected: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    hung: int = 0
    seconds: float = 0.0
    by_case: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.unexpected or self.mismatches or self.hung)

    def percentile(self, q: float) -> float:
        """The q-th percentile (0-100) of the completed requests' latencies (nearest rank)."""
        if not self.latencies:
            return float("nan")
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, max(0, round(q / 100 * len(xs) + 0.5) - 1))]

    def summary(self) -> str:
        cases = ", ".join(f"{k} {v}" for k, v in sorted(self.by_case.items()))
        rps = self.completed / self.seconds if self.seconds else 0.0
        return (
            f"{self.requests} requests in {self.seconds:.1f} s: {self.completed} completed "
            f"({rps:.2f}/s, p50 {self.percentile(50):.2f} s, p99 {self.percentile(99):.2f} s), "
            f"{self.cancelled} cancelled, {self.rejected} refused (503, queue full), "
            f"{self.expected_errors} expected errors (bad requests), "
            f"{len(self.unexpected)} unexpected errors, {len(self.mismatches)} greedy mismatches, "
            f"{self.hung} hung clients\n  by case: {cases}"
        )


class Load:
    """Requests against the server at url (``http://host:port``). max_body: the server's body
    limit, for an oversized-body case (None: no such case)."""

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 24,
        long_repeats: int = 4,
        timeout: float = 120.0,
        chat: bool = True,
        max_body: int | None = None,
    ) -> None:
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.model, self.api_key, self.timeout = model, api_key, timeout
        self.cases = self.make_cases(max_tokens, LONG_TEXT * long_repeats, chat, max_body)

    # ---- the request mix ----

    def make_cases(self, max_tokens: int, long_prompt: str, chat: bool, max_body: int | None = None) -> list[Case]:
        m = {"model": self.model} if self.model else {}
        comp, chatp = "/v1/completions", "/v1/chat/completions"
        msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name three colours."}]
        cases = [
            Case(
                "short",
                comp,
                {**m, "prompt": "def add(a, b):", "max_tokens": max_tokens, "stream": True},
                greedy=True,
                weight=3,
            ),
            Case(
                "short-whole", comp, {**m, "prompt": "def add(a, b):", "max_tokens": max_tokens}, greedy=True, weight=2
            ),
            Case(
                "long",
                comp,
                {**m, "prompt": long_prompt, "max_tokens": max_tokens, "stream": True},
                greedy=True,
                weight=3,
            ),
            Case(
                "stop",
                comp,
                {**m, "prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True, "stop": ["\n", "e "]},
                greedy=True,
                weight=3,
            ),
            Case(
                "n3",
                comp,
                {**m, "prompt": "import os\n", "max_tokens": max_tokens // 2, "n": 3, "stream": True},
                greedy=True,
                weight=2,
            ),
            Case(
                "sampled",
                comp,
                {
                    **m,
                    "prompt": "Once upon a time",
                    "max_tokens": max_tokens,
                    "stream": True,
                    "temperature": 0.8,
                    "seed": 5,
                },
                weight=2,
            ),
            Case(
                "cancel",
                comp,
                {**m, "prompt": long_prompt[:200], "max_tokens": 8 * max_tokens, "stream": True, "ignore_eos": True},
                cancel=True,
                weight=3,
            ),
            Case(
                "cancel-n3",
                comp,
                {**m, "prompt": "The cat", "max_tokens": 8 * max_tokens, "n": 3, "stream": True, "ignore_eos": True},
                cancel=True,
            ),
            Case("bad-json", comp, b'{"prompt": "hi", "max_tokens": 4,}', expect=400),
            Case("bad-model", comp, {"model": "no-such-model", "prompt": "hi", "max_tokens": 4}, expect=404),
            Case("bad-field", comp, {**m, "prompt": "hi", "max_tokens": 0}, expect=400),
        ]
        if max_body is not None:
            big = json.dumps({**m, "prompt": "x" * (max_body + 1024), "max_tokens": 4}).encode()
            cases.append(Case("too-large", comp, big, expect=413))
        if chat:
            cases += [
                Case(
                    "chat",
                    chatp,
                    {**m, "messages": msgs, "max_tokens": max_tokens, "stream": True, "stop": ["."]},
                    greedy=True,
                    weight=3,
                ),
                Case("chat-whole", chatp, {**m, "messages": msgs, "max_tokens": max_tokens}, greedy=True, weight=2),
                Case(
                    "chat-cancel",
                    chatp,
                    {**m, "messages": msgs, "max_tokens": 8 * max_tokens, "stream": True, "ignore_eos": True},
                    cancel=True,
                ),
                Case("bad-chat", chatp, {**m, "messages": [], "max_tokens": 4}, expect=400),
            ]
        if self.api_key:
            cases.append(Case("no-key", comp, {**m, "prompt": "hi", "max_tokens": 4}, expect=401, auth=False))
        return cases

    # ---- one request ----

    def request(self, case: Case, rng: random.Random | None = None) -> Outcome:
        """Send case's request; a stream of a cancel case is closed after 1-6 events (rng)."""
        body = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key and case.auth:
            headers["Authorization"] = f"Bearer {self.api_key}"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        t0 = time.monotonic()

        def out(kind: str, status: int, texts=None, **kw) -> Outcome:
            return Outcome(kind, status, texts, time.monotonic() - t0, **kw)

        try:
            conn.request("POST", case.path, body=body, headers=headers)
            resp = conn.getresponse()
            if resp.status != 200 or not case.stream:
                raw = resp.read()
                try:
                    obj = json.loads(raw)
                except ValueError:
                    return out(f"error: not JSON: {raw[:200]!r}", resp.status)
                if resp.status != 200:
                    err = obj.get("error") if isinstance(obj, dict) else None
                    if not isinstance(err, dict) or set(err) != {"message", "type", "param", "code"}:
                        return out(f"error: not OpenAI's error shape: {raw[:200]!r}", resp.status)
                    return out(
                        f"rejected: {err['message']}",
                        resp.status,
                        retry_after=resp.getheader("Retry-After"),
                        code=err["code"],
                    )
                key = "text" if case.path.endswith("/completions") and "chat" not in case.path else "message"
                return out(
                    "done",
                    200,
                    {c["index"]: (c["text"] if key == "text" else c["message"]["content"]) for c in obj["choices"]},
                )
            texts: dict[int, str] = {}
            stop_after = rng.randint(1, 6) if case.cancel and rng else None
            events = 0
            while True:
                line = resp.readline()
                if not line:
                    return out("error: the stream ended without [DONE]", 200)
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    return out("done", 200, texts)
                event = json.loads(data)
                if "error" in event:
                    return out(f"error: in the stream: {event['error'].get('message')}", 200)
                for c in event.get("choices", ()):
                    piece = c["text"] if "text" in c else (c.get("delta") or {}).get("content")
                    texts[c["index"]] = texts.get(c["index"], "") + (piece or "")
                events += 1
                if stop_after is not None and events >= stop_after:
                    return out("cancelled", 200)  # closing the connection cancels the generation
        except (OSError, http.client.HTTPException, ValueError) as e:
            return out(f"error: {type(e).__name__}: {e}", 0)
        finally:
            conn.close()

    def get(self, path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})
            r = conn.getresponse()
            return r.status, r.read().decode()
        finally:
            conn.close()

    def metrics(self) -> dict[str, float]:
        """/metrics as {sample name with its labels: value}."""
        status, text = self.get("/metrics")
        if status != 200:
            raise RuntimeError(f"GET /metrics: {status}")
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    # ---- the run ----

    def references(self) -> dict[str, dict[int, str]]:
        """Each greedy case's texts, asked alone and not streamed (the single-request output)."""
        refs = {}
        for case in self.cases:
            if case.greedy:
                body = {k: v for k, v in case.body.items() if k != "stream"}
                got = self.request(Case(case.name, case.path, body))
                if got.kind != "done" or got.status != 200:
                    raise RuntimeError(f"the reference request {case.name} failed: {got.status} {got.kind}")
                refs[case.name] = got.texts
        return refs

    def run(
        self,
        refs: dict[str, dict[int, str]],
        *,
        clients: int = 16,
        per_client: int = 6,
        seed: int = 0,
        deadline: float = 300.0,
        cases: list[Case] | None = None,
    ) -> Report:
        """clients threads, each sending per_client requests drawn from the cases (seeded)."""
        report, lock = Report(), threading.Lock()
        cases = cases or self.cases
        weights = [c.weight for c in cases]

        def client(i: int) -> None:
            rng = random.Random(seed * 1000 + i)
            for _ in range(per_client):
                case = rng.choices(cases, weights)[0]
                got = self.request(case, rng)
                with lock:
                    self._account(report, case, got, refs)
                if got.status == 503:
                    time.sleep(rng.uniform(0.05, 0.2))  # a refused client backs off a little

        t0 = time.monotonic()
        threads = [
            threading.Thread(target=client, args=(i,), name=f"load-client-{i}", daemon=True) for i in range(clients)
        ]
        for t in threads:
            t.start()
        end = t0 + deadline
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
        report.hung = sum(t.is_alive() for t in threads)
        report.seconds = time.monotonic() - t0
        return report

    @staticmethod
    def _account(report: Report, case: Case, got: Outcome, refs: dict) -> None:
        report.requests += 1
        report.by_case[case.name] = report.by_case.get(case.name, 0) + 1
        if got.status == 503 and got.kind.startswith("rejected") and got.code == "server_overloaded":
            if got.retry_after is None or not got.retry_after.isdigit() or int(got.retry_after) < 1:
                report.unexpected.append(f"{case.name}: 503 without a Retry-After in seconds ({got.retry_after!r})")
            else:
                report.rejected += 1
        elif got.kind.startswith("error") or got.status != case.expect:
            report.unexpected.append(f"{case.name}: status {got.status} (want {case.expect}), {got.kind}")
        elif case.expect != 200:
            report.expected_errors += 1
        elif got.kind == "cancelled":
            report.cancelled += 1
        else:
            report.completed += 1
            report.latencies.append(got.seconds)
            if case.greedy and got.texts != refs[case.name]:
                report.mismatches.append(f"{case.name}: {got.texts!r} != reference {refs[case.name]!r}")

    def close_to_free(self, repeats: int = 5, max_tokens: int = 2000) -> list[float]:
        """Seconds from a client closing its stream to the server having freed its slot (the
        cancelled generations in /metrics went up), one stream at a time on an idle server."""
        m = {"model": self.model} if self.model else {}
        case = Case(
            "close",
            "/v1/completions",
            {**m, "prompt": LONG_TEXT, "max_tokens": max_tokens, "stream": True, "ignore_eos": True},
        )
        key = "pymtp_generations_cancelled_total"
        out = []
        for _ in range(repeats):
            before = self.metrics()[key]
            body = json.dumps(case.body).encode()
            headers = {"Content-Type": "application/json"}
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            conn.request("POST", case.path, body=body, headers=headers)
            resp = conn.getresponse()
            for _ in range(3):  # the role-less completion stream: a few pieces
                resp.readline()
            conn.close()
            t0 = time.monotonic()
            while self.metrics()[key] == before:
                if time.monotonic() - t0 > self.timeout:
                    raise RuntimeError("the slot of a closed stream was not freed")
                time.sleep(0.002)
            out.append(time.monotonic() - t0)
        return out


def metric(load: Load, name: str) -> float:
    """One sample of /metrics (by its name with labels, as the text format writes it)."""
    return load.metrics()[name]


#: What a server must not log for client behaviour (a closed stream, a bad request).
_PROBLEMS = re.compile(r"Traceback|Exception in ASGI application|Error in ASGI|RuntimeError|ERROR")


def log_problems(log: str) -> list[str]:
    """The lines of a server's log that show a traceback or an error."""
    return [line for line in log.splitlines() if _PROBLEMS.search(line)]


# ---- the server process ----


def rss_bytes(pid: int) -> int:
    """The resident set size of process pid (Linux /proc, else psutil)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    import psutil  # not Linux: needs psutil

    return psutil.Process(pid).memory_info().rss


class Server:
    """A ``pymtp serve`` subprocess on 127.0.0.1 (a context manager: stopped at exit). Its output
    goes to a temporary file (output()), or stderr to the file given (e.g. a pipe)."""

    def __init__(
        self,
        args: list[str],
        *,
        api_key: str | None = None,
        startup: float = 120.0,
        log_level: str = "info",
        stderr: BinaryIO | int | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.max_body = _max_body(args)
        env = dict(os.environ)
        env.pop("PYMTP_API_KEY", None)
        if api_key:
            env["PYMTP_API_KEY"] = api_key
        cmd = [
            sys.executable,
            "-m",
            "pymtp",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            log_level,
            "-q",
            *args,
        ]
        self.log = tempfile.TemporaryFile()  # a file, not a pipe: a chatty server cannot block on it
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT if stderr is None else stderr
        )
        self.pid = self.proc.pid
        self._wait(startup)

    def _wait(self, startup: float) -> None:
        end = time.monotonic() + startup
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pymtp serve exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            try:
                if Load(self.url, timeout=2).get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"pymtp serve did not answer /health within {startup} s")

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def output(self) -> str:
        """What the server printed so far (stdout, and stderr unless it went elsewhere)."""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait (SIGKILL after timeout); the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(20)
        return self.proc.returncode

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _max_body(args: list[str]) -> int | None:
    """The --max-body of a serve command line, in bytes (None when not given)."""
    if "--max-body" not in args:
        return None
    text = args[args.index("--max-body") + 1].upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def start_server(args: list[str], **kw) -> Server:
    """``pymtp serve <args>`` on a free port of 127.0.0.1, once it answers /health."""
    return Server(args, **kw)
