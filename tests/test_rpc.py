"""Models split across hosts with llama.cpp's RPC backend (pymtp.rpc).

Each "host" is a ggml-rpc-server in a network namespace of its own, joined to this one by a
veth pair (addresses 10.233.<i>.0/30); where namespaces cannot be made (no root, no iproute2)
the servers listen on 127.0.0.1, and the test prints which mode it ran. Latency is added by a
user-space proxy (pymtp_testing.hosts.DelayProxy): tc netem needs sch_netem, which this
project's CI kernels lack. Every namespace and process a test starts is removed by its id.
"""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

import pymtp
from pymtp.errors import ModelLoadError, PymtpError
from pymtp_testing import hosts as machine
from pymtp_testing.hosts import DelayProxy, Namespace, netns_unavailable

N = 12
WHY_NO_NETNS = netns_unavailable()
DEEP = {"n_trunk": 6}  # six trunk blocks: every host gets some (the MTP block and the head stay here)


@pytest.fixture(scope="module")
def server_binary():
    try:
        return machine.rpc_server_binary()
    except Exception as e:  # a build failure is a failure, not a skip
        pytest.fail(f"building ggml-rpc-server failed: {e}")


class Hosts:
    """n rpc-servers, each in its own namespace (or on 127.0.0.1); started, tracked, removed."""

    def __init__(self, n: int, binary) -> None:
        self.spaces: list[Namespace] = []
        self.servers: list[machine.RPCServer] = []
        self.mode = "127.0.0.1" if WHY_NO_NETNS else "network namespaces"
        try:
            for _i in range(n):
                if WHY_NO_NETNS:
                    self.servers.append(machine.RPCServer(binary=binary))
                else:
                    ns = Namespace()
                    self.spaces.append(ns)
                    self.servers.append(machine.RPCServer(ns.ns_ip, 50052, prefix=ns.prefix, binary=binary))
        except BaseException:
            self.close()
            raise

    @property
    def endpoints(self) -> list[str]:
        return [s.endpoint for s in self.servers]

    def bytes_crossed(self) -> int:
        return sum(self.bytes_each())

    def bytes_each(self) -> list[int]:
        return [ns.bytes_crossed() for ns in self.spaces]

    def close(self) -> None:
        for s in self.servers:
            s.close()
        for ns in self.spaces:
            ns.close()
        pids = [s.proc.pid for s in self.servers]
        assert all(s.proc.poll() is not None for s in self.servers), pids
        assert not any(ns.exists() for ns in self.spaces)


@pytest.fixture
def hosts(server_binary):
    made: list[Hosts] = []

    def make(n: int = 2) -> Hosts:
        made.append(Hosts(n, server_binary))
        print(f"rpc test mode: {made[-1].mode}" + (f" ({WHY_NO_NETNS})" if WHY_NO_NETNS else ""))
        return made[-1]

    yield make
    for h in made:
        h.close()


def single_process(path, prompt, **kw) -> list[int]:
    with pymtp.load(path, n_ctx=256, n_threads=1) as s:
        return pymtp.generate(prompt, s, max_tokens=N, ignore_eos=True, **kw).tokens


@pytest.mark.parametrize("family", ["glm4moe", "qwen35", "step35"])
def test_a_split_model_decodes_as_one_process_does(family, gguf, hosts, same_greedy):
    path = gguf(family, **DEEP)
    h = hosts(2)
    with pymtp.load(path, n_ctx=256, n_threads=1, rpc_servers=h.endpoints, tensor_split=[1, 1]) as s:
        prompt = s.tokenize("def parse(line):\n    ")
        before = h.bytes_each()
        spec = pymtp.generate(prompt, s, max_tokens=N, ignore_eos=True, speculative=True)
        plain = pymtp.generate(prompt, s, max_tokens=N, ignore_eos=True, speculative=False)
        assert spec.stats.n_drafted > 0
        same_greedy(s, prompt, spec.tokens, plain.tokens)
        same_greedy(s, prompt, spec.tokens, single_process(path, prompt, speculative=False))
        if h.spaces:  # every host did run layers
            assert all(b > a + 10_000 for a, b in zip(before, h.bytes_each())), (before, h.bytes_each())


def test_three_hosts(gguf, hosts, same_greedy):
    path = gguf("glm4moe", **DEEP)
    h = hosts(3)
    with pymtp.load(path, n_ctx=256, n_threads=1, rpc_servers=h.endpoints, tensor_split=[1, 1, 2]) as s:
        prompt = s.tokenize("import os\nimport sys\n")
        before = h.bytes_each()
        r = pymtp.generate(prompt, s, max_tokens=N, ignore_eos=True, speculative=True)
        same_greedy(s, prompt, r.tokens, single_process(path, prompt, speculative=False))
        if h.spaces:
            assert all(b > a + 10_000 for a, b in zip(before, h.bytes_each())), (before, h.bytes_each())


def test_the_mtp_block_stays_local_by_default(gguf, hosts, same_greedy):
    """Drafting with the MTP block and the head in local memory sends fewer bytes than with
    them remote."""
    if WHY_NO_NETNS:
        pytest.skip(f"bytes are counted on the namespaces' veth pairs: {WHY_NO_NETNS}")
    path = gguf("glm4moe", **DEEP)
    h = hosts(2)
    crossed, outputs = {}, {}
    for local in (True, False):
        with pymtp.load(path, n_ctx=256, n_threads=1, rpc_servers=h.endpoints, mtp_local=local) as s:
            prompt = s.tokenize("class Stack:\n    def push(self, x):")
            pymtp.generate(prompt, s, max_tokens=2, ignore_eos=True)  # warm: weights are there
            b0 = h.bytes_crossed()
            r = pymtp.generate(prompt, s, max_tokens=N, ignore_eos=True, speculative={"n_draft": 3})
            crossed[local] = (h.bytes_crossed() - b0) / len(r.tokens)
            outputs[local] = r.tokens
    assert outputs[True] == outputs[False]
    assert crossed[True] < crossed[False], crossed


def test_a_killed_server_raises_and_the_model_loads_again(gguf, hosts, server_binary):
    path = gguf("glm4moe", **DEEP)
    h = hosts(2)
    s = pymtp.load(path, n_ctx=256, n_threads=1, rpc_servers=h.endpoints, rpc_timeout=10)
    prompt = s.tokenize("def parse(line):\n    ")
    stream = pymtp.stream(prompt, s, max_tokens=200, ignore_eos=True)
    next(iter(stream))
    h.servers[1].kill()  # a host dies mid-generation
    t0 = time.monotonic()
    with pytest.raises(PymtpError, match="RPC server"):
        for _ in stream:
            pass
    assert time.monotonic() - t0 < 10
    assert s.model.failed
    with pytest.raises(PymtpError, match="RPC server of this model failed earlier"):
        pymtp.generate(prompt, s, max_tokens=2)
    s.close()  # no crash freeing memory of a dead host
    h.servers[1] = machine.RPCServer(
        h.servers[1].host, h.servers[1].port, prefix=h.spaces[1].prefix if h.spaces else (), binary=server_binary
    )
    with pymtp.load(path, n_ctx=256, n_threads=1, rpc_servers=h.endpoints) as s2:
        assert pymtp.generate(prompt, s2, max_tokens=N, ignore_eos=True).tokens == single_process(path, prompt)


def test_a_server_that_stops_answering_times_out(gguf, hosts):
    path = gguf("glm4moe", **DEEP)
    h = hosts(2)
    s = pymtp.load(path, n_ctx=256, n_threads=1, rpc_servers=h.endpoints, rpc_timeout=2)
    try:
        prompt = s.tokenize("for i in range(10):")
        pymtp.generate(prompt, s, max_tokens=2)
        h.servers[0].proc.send_signal(signal.SIGSTOP)  # alive, silent
        t0 = time.monotonic()
        with pytest.raises(PymtpError, match="RPC server"):
            pymtp.generate(s.tokenize("while True:"), s, max_tokens=8, ignore_eos=True)
        assert time.monotonic() - t0 < 2 * 3 + 5  # a few exchanges time out, no hang
    finally:
        h.servers[0].proc.send_signal(signal.SIGCONT)
        s.close()


def test_latency_changes_the_time_not_the_text(gguf, hosts):
    path = gguf("glm4moe")
    h = hosts(1)
    host, port = h.servers[0].host, h.servers[0].port
    with DelayProxy((host, port), delay=0.005) as proxy:
        with pymtp.load(path, n_ctx=256, n_threads=1, rpc_servers=[proxy.endpoint]) as s:
            prompt = s.tokenize("import os\n")
            r = pymtp.generate(prompt, s, max_tokens=N, ignore_eos=True)
        assert proxy.bytes > 0
    assert r.tokens == single_process(path, prompt)


@pytest.mark.parametrize(
    "servers,match",
    [
        (["localhost"], "host:port"),
        (["h:99999"], "host:port"),
        ([""], "host:port"),
        (["a:1,b:2"], "host:port"),
    ],
)
def test_bad_endpoints_are_refused_before_loading(gguf, servers, match):
    with pytest.raises(ValueError, match=match):
        pymtp.load(gguf("glm4moe"), rpc_servers=servers)


def test_an_unreachable_server_is_a_load_error(gguf):
    port = machine.free_port()  # nothing listens there
    with pytest.raises(ModelLoadError, match="connect"):
        pymtp.load(gguf("glm4moe"), rpc_servers=[f"127.0.0.1:{port}"], rpc_timeout=2)


def test_tensor_split_needs_servers(gguf):
    with pytest.raises(ValueError, match="rpc_servers"):
        pymtp.load(gguf("glm4moe"), tensor_split=[1, 1])
    with pytest.raises(ValueError, match="shares"):
        pymtp.Model(gguf("glm4moe"), rpc_servers=["127.0.0.1:1"], tensor_split=[0, 0])


def test_no_namespace_or_server_is_left_behind(server_binary):
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout if not WHY_NO_NETNS else ""
    assert "pymtp-" not in out
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(server_binary) not in ps


def test_the_command_line_takes_rpc_servers(gguf, hosts, capsys):
    from pymtp.cli import EXIT_OK, main

    path = gguf("glm4moe", **DEEP)
    h = hosts(2)
    before = h.bytes_each()
    capsys.readouterr()  # the fixture's mode line
    rc = main(
        [
            "generate",
            "-m",
            str(path),
            "-n",
            str(N),
            "--ignore-eos",
            "--rpc",
            ",".join(h.endpoints),
            "--tensor-split",
            "1,1",
            "-q",
            "def f(x):",
        ]
    )
    out = capsys.readouterr().out
    assert rc == EXIT_OK
    with pymtp.load(path, n_ctx=256, n_threads=1) as s:
        assert out == pymtp.generate("def f(x):", s, max_tokens=N, ignore_eos=True).text + "\n"
    if h.spaces:
        assert all(b > a for a, b in zip(before, h.bytes_each()))
