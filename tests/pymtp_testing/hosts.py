"""Hosts on one machine, for multi-host tests and benchmarks: llama.cpp's ggml-rpc-server
(built from the pinned tree) run as processes, network namespaces joined to this one by veth
pairs, and a TCP proxy that adds latency and counts the bytes crossing.

``tc netem`` is the usual way to add latency; kernels without ``sch_netem`` (this project's
CI machines among them) cannot, so ``DelayProxy`` adds it in user space: every chunk is held
for the one-way delay before it is passed on (a link with latency, without a bandwidth limit).
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from pymtp.errors import ModelLoadError
from pymtp.rpc import rpc_server_binary


def netns_unavailable() -> str:
    """Why network namespaces cannot be made here ("" when they can)."""
    if not shutil.which("ip"):
        return "the ip tool (iproute2) is not installed"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    name = f"pymtp-probe-{uuid.uuid4().hex[:6]}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ""


def _free_subnet() -> int:
    """A third octet x for which nothing here has an address in 10.233.x.0/24."""
    out = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    used = {int(x) for x in re.findall(r"inet 10\.233\.(\d+)\.", out)}
    for x in range(256):
        if x not in used:
            return x
    raise RuntimeError("no free 10.233.x.0/24 subnet left")


class Namespace:
    """A network namespace linked to this one by a veth pair: this side has ``host_ip``, the
    namespace ``ns_ip`` (a /30 of 10.233.<index>.0; default: a subnet nothing here uses).
    Removed, with its links, on close()."""

    def __init__(self, index: int | None = None) -> None:
        if index is None:
            index = _free_subnet()
        if not 0 <= index < 256:
            raise ValueError("index must be in [0, 256)")
        tag = uuid.uuid4().hex[:6]
        self.name = f"pymtp-{tag}-{index}"
        self.host_if, self.ns_if = f"pm{tag}{index}a", f"pm{tag}{index}b"
        self.host_ip, self.ns_ip = f"10.233.{index}.1", f"10.233.{index}.2"
        self.prefix = ["ip", "netns", "exec", self.name]
        steps = [
            ["ip", "netns", "add", self.name],
            ["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if],
            ["ip", "link", "set", self.ns_if, "netns", self.name],
            ["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if],
            ["ip", "link", "set", self.host_if, "up"],
            [*self.prefix, "ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if],
            [*self.prefix, "ip", "link", "set", self.ns_if, "up"],
            [*self.prefix, "ip", "link", "set", "lo", "up"],
        ]
        try:
            for cmd in steps:
                subprocess.run(cmd, check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as e:
            self.close()
            raise RuntimeError(f"{' '.join(e.cmd)}: {e.stderr.strip()}") from None

    def bytes_crossed(self) -> int:
        """Bytes through the veth pair so far, both ways (this side's counters)."""
        base = f"/sys/class/net/{self.host_if}/statistics"
        try:
            return sum(int(open(f"{base}/{k}").read()) for k in ("rx_bytes", "tx_bytes"))
        except OSError:
            return 0

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)

    def exists(self) -> bool:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return any(line.split()[0] == self.name for line in out.splitlines() if line.strip())

    def __enter__(self) -> Namespace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class DelayProxy:
    """Listens on 127.0.0.1 and forwards each connection to target (host, port), holding every
    chunk for ``delay`` seconds each way; ``bytes`` counts what crossed, both ways."""

    def __init__(self, target: tuple[str, int], delay: float = 0.0) -> None:
        self.target, self.delay = target, delay
        self.bytes = 0
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port = self._sock.getsockname()[1]
        self.endpoint = f"127.0.0.1:{self.port}"
        self._conns: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.settimeout(None)
            self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                q: queue.Queue = queue.Queue()
                threading.Thread(target=self._read, args=(a, q), daemon=True).start()
                threading.Thread(target=self._write, args=(b, q), daemon=True).start()

    def _read(self, src: socket.socket, q: queue.Queue) -> None:
        while True:
            try:
                data = src.recv(1 << 16)
            except OSError:
                data = b""
            q.put((time.monotonic() + self.delay, data))
            if not data:
                return

    def _write(self, dst: socket.socket, q: queue.Queue) -> None:
        while True:
            due, data = q.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            with self._lock:
                self.bytes += len(data)
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        for s in self._conns:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> DelayProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class RPCServer:
    """A ggml-rpc-server process on this machine (prefix: a command to run it under, such as
    ``["ip", "netns", "exec", name]``). Stopped by its pid on close()."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        *,
        threads: int = 1,
        prefix: Sequence[str] = (),
        binary: Path | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        self.host, self.port = host, port or free_port()
        self.endpoint = f"{host}:{self.port}"
        cmd = [*prefix, str(binary or rpc_server_binary()), "-H", host, "-p", str(self.port), "-t", str(threads)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")[-500:]
                raise ModelLoadError(f"ggml-rpc-server exited with {self.proc.returncode}: {err}")
            if self._accepts():
                return
            time.sleep(0.05)
        self.close()
        raise ModelLoadError(f"ggml-rpc-server did not listen on {self.endpoint} within {startup_timeout} s")

    def _accepts(self) -> bool:
        """Whether it listens (a namespace's address is reached through its veth pair)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return self.proc.poll() is None
        except OSError:
            return False

    def kill(self) -> None:
        """End it at once (a host that dies)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stderr:
            self.proc.stderr.close()

    def __enter__(self) -> RPCServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
