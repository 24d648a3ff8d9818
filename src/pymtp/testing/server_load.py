"""A load and fault run against a pymtp server: concurrent streaming clients, cancellations, bad requests.

Used by ``tests/test_server_load.py`` (on a fixture model) and ``tools/load_test.py`` (on any
model). Standard library only (http.client, threads), so it measures the server and not a
client library::

    from pymtp.testing.server_load import Load, start_server
    with start_server(["-m", "model.gguf", "--threads", "1"]) as srv:
        load = Load(srv.url, api_key=srv.api_key)
        refs = load.references()              # each greedy case alone, not streamed
        report = load.run(refs, clients=16, per_client=6)
        print(report.summary())

Each client runs a bounded number of requests drawn (seeded) from ``Load.cases``: greedy
completions and chats, streamed or not, short and long prompts, stop strings, n=2,
sampled ones (checked for status only), streams the client closes after a few events,
and bad requests (malformed JSON, an unknown model, an invalid field, a missing API
key) that must get their 4xx. A greedy response that completes must equal the
request's reference text; every socket has a timeout and the run a deadline, so a hung
server fails the run instead of hanging it.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from .hosts import free_port

__all__ = ["Case", "Load", "Report", "Server", "rss_bytes", "start_server"]

LONG_TEXT = ("The quick brown fox jumps over the lazy dog while the committee reviews the quarterly report. "
             "Meanwhile, in the server room, the fans hum and the logs scroll past without end. ")


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
    weight: int = 1          # how often it is drawn, relative to the others

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))


@dataclass
class Report:
    """What a run did. unexpected: requests that got another status or an error event;
    mismatches: greedy responses that differ from their reference; hung: clients that
    did not finish by the deadline."""

    requests: int = 0
    completed: int = 0
    cancelled: int = 0
    expected_errors: int = 0
    unexpected: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    hung: int = 0
    seconds: float = 0.0
    by_case: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.unexpected or self.mismatches or self.hung)

    def summary(self) -> str:
        cases = ", ".join(f"{k} {v}" for k, v in sorted(self.by_case.items()))
        return (f"{self.requests} requests in {self.seconds:.1f} s: {self.completed} completed, "
                f"{self.cancelled} cancelled, {self.expected_errors} expected errors (bad requests), "
                f"{len(self.unexpected)} unexpected errors, {len(self.mismatches)} greedy mismatches, "
                f"{self.hung} hung clients\n  by case: {cases}")


class Load:
    """Requests against the server at url (``http://host:port``)."""

    def __init__(self, url: str, *, model: str | None = None, api_key: str | None = None,
                 max_tokens: int = 24, long_repeats: int = 4, timeout: float = 120.0, chat: bool = True) -> None:
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.model, self.api_key, self.timeout = model, api_key, timeout
        self.cases = self.make_cases(max_tokens, LONG_TEXT * long_repeats, chat)

    # ---- the request mix ----

    def make_cases(self, max_tokens: int, long_prompt: str, chat: bool) -> list[Case]:
        m = {"model": self.model} if self.model else {}
        comp, chatp = "/v1/completions", "/v1/chat/completions"
        msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name three colours."}]
        cases = [
            Case("short", comp, {**m, "prompt": "def add(a, b):", "max_tokens": max_tokens, "stream": True},
                 greedy=True, weight=3),
            Case("short-whole", comp, {**m, "prompt": "def add(a, b):", "max_tokens": max_tokens}, greedy=True, weight=2),
            Case("long", comp, {**m, "prompt": long_prompt, "max_tokens": max_tokens, "stream": True}, greedy=True, weight=3),
            Case("stop", comp, {**m, "prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True,
                                "stop": ["\n", "e "]}, greedy=True, weight=3),
            Case("n2", comp, {**m, "prompt": "import os\n", "max_tokens": max_tokens // 2, "n": 2, "stream": True},
                 greedy=True, weight=2),
            Case("sampled", comp, {**m, "prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True,
                                   "temperature": 0.8, "seed": 5}, weight=2),
            Case("cancel", comp, {**m, "prompt": long_prompt[:200], "max_tokens": 8 * max_tokens, "stream": True,
                                  "ignore_eos": True}, cancel=True, weight=3),
            Case("bad-json", comp, b'{"prompt": "hi", "max_tokens": 4,}', expect=400),
            Case("bad-model", comp, {"model": "no-such-model", "prompt": "hi", "max_tokens": 4}, expect=404),
            Case("bad-field", comp, {**m, "prompt": "hi", "max_tokens": 0}, expect=400),
        ]
        if chat:
            cases += [
                Case("chat", chatp, {**m, "messages": msgs, "max_tokens": max_tokens, "stream": True,
                                     "stop": ["."]}, greedy=True, weight=3),
                Case("chat-whole", chatp, {**m, "messages": msgs, "max_tokens": max_tokens}, greedy=True, weight=2),
                Case("bad-chat", chatp, {**m, "messages": [], "max_tokens": 4}, expect=400),
            ]
        if self.api_key:
            cases.append(Case("no-key", comp, {**m, "prompt": "hi", "max_tokens": 4}, expect=401, auth=False))
        return cases

    # ---- one request ----

    def request(self, case: Case, rng: random.Random | None = None) -> tuple[str, int, dict[int, str] | None]:
        """("done" | "cancelled" | "rejected: <message>" (not 200) | "error: ...", status,
        {choice index: text} of a 200 that completed)."""
        body = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key and case.auth:
            headers["Authorization"] = f"Bearer {self.api_key}"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", case.path, body=body, headers=headers)
            resp = conn.getresponse()
            if resp.status != 200 or not case.stream:
                raw = resp.read()
                try:
                    out = json.loads(raw)
                except ValueError:
                    return f"error: not JSON: {raw[:200]!r}", resp.status, None
                if resp.status != 200:
                    return f"rejected: {(out.get('error') or {}).get('message', out)}", resp.status, None
                key = "text" if case.path.endswith("/completions") and "chat" not in case.path else "message"
                return "done", 200, {c["index"]: (c["text"] if key == "text" else c["message"]["content"])
                                     for c in out["choices"]}
            texts: dict[int, str] = {}
            stop_after = rng.randint(1, 6) if case.cancel and rng else None
            events = 0
            while True:
                line = resp.readline()
                if not line:
                    return "error: the stream ended without [DONE]", 200, None
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    return "done", 200, texts
                event = json.loads(data)
                if "error" in event:
                    return f"error: in the stream: {event['error'].get('message')}", 200, None
                for c in event.get("choices", ()):
                    piece = c["text"] if "text" in c else (c.get("delta") or {}).get("content")
                    texts[c["index"]] = texts.get(c["index"], "") + (piece or "")
                events += 1
                if stop_after is not None and events >= stop_after:
                    return "cancelled", 200, None      # closing the connection cancels the generation
        except (OSError, http.client.HTTPException, ValueError) as e:
            return f"error: {type(e).__name__}: {e}", 0, None
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

    # ---- the run ----

    def references(self) -> dict[str, dict[int, str]]:
        """Each greedy case's texts, asked alone and not streamed (the single-request output)."""
        refs = {}
        for case in self.cases:
            if case.greedy:
                body = {k: v for k, v in case.body.items() if k != "stream"}
                whole = Case(case.name, case.path, body)
                outcome, status, texts = self.request(whole)
                if outcome != "done" or status != 200:
                    raise RuntimeError(f"the reference request {case.name} failed: {status} {outcome}")
                refs[case.name] = texts
        return refs

    def run(self, refs: dict[str, dict[int, str]], *, clients: int = 16, per_client: int = 6, seed: int = 0,
            deadline: float = 300.0) -> Report:
        """clients threads, each sending per_client requests drawn from the cases (seeded)."""
        report, lock = Report(), threading.Lock()
        weights = [c.weight for c in self.cases]

        def client(i: int) -> None:
            rng = random.Random(seed * 1000 + i)
            for _ in range(per_client):
                case = rng.choices(self.cases, weights)[0]
                outcome, status, texts = self.request(case, rng)
                with lock:
                    report.requests += 1
                    report.by_case[case.name] = report.by_case.get(case.name, 0) + 1
                    if outcome.startswith("error") or status != case.expect:
                        report.unexpected.append(f"{case.name}: status {status} (want {case.expect}), {outcome}")
                    elif case.expect != 200:
                        report.expected_errors += 1
                    elif outcome == "cancelled":
                        report.cancelled += 1
                    else:
                        report.completed += 1
                        if case.greedy and texts != refs[case.name]:
                            report.mismatches.append(f"{case.name}: {texts!r} != reference {refs[case.name]!r}")

        t0 = time.monotonic()
        threads = [threading.Thread(target=client, args=(i,), name=f"load-client-{i}", daemon=True)
                   for i in range(clients)]
        for t in threads:
            t.start()
        end = t0 + deadline
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
        report.hung = sum(t.is_alive() for t in threads)
        report.seconds = time.monotonic() - t0
        return report


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
    """A ``pymtp serve`` subprocess on 127.0.0.1 (a context manager: stopped at exit)."""

    def __init__(self, args: list[str], *, api_key: str | None = None, startup: float = 120.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        env = dict(os.environ)
        env.pop("PYMTP_API_KEY", None)
        if api_key:
            env["PYMTP_API_KEY"] = api_key
        cmd = [sys.executable, "-m", "pymtp", "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--log-level", "warning", "-q", *args]
        self.log = tempfile.TemporaryFile()          # a file, not a pipe: a chatty server cannot block on it
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
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
        """What the server printed so far (stdout and stderr)."""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(20)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_server(args: list[str], **kw) -> Server:
    """``pymtp serve <args>`` on a free port of 127.0.0.1, once it answers /health."""
    return Server(args, **kw)
