"""Models spread over several hosts with llama.cpp's RPC backend.

Each host runs llama.cpp's ``ggml-rpc-server``; pymtp connects to them and places the
trunk's layers on their devices::

    model = pymtp.load("model.gguf", rpc_servers=["10.0.0.2:50052", "10.0.0.3:50052"],
                       tensor_split=[1, 1])

The MTP blocks and the output head stay in local memory by default (``mtp_local=True``): a
draft step then costs no network round trip, and the verify decode crosses the network with
k+1 hidden rows (n_embd floats each) instead of one, while the vocabulary-wide logits rows are
computed here. A server that fails raises ``PymtpError`` (after at most ``rpc_timeout`` seconds of
silence) and marks the model failed: close it and load it again.

This module checks endpoints, sets the timeout, and builds ``ggml-rpc-server`` from the pinned
llama.cpp tree (``rpc_server_binary``); the test suite runs such servers on one machine.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

#: Seconds an exchange with a server may stay silent before it counts as failed.
DEFAULT_TIMEOUT = 120.0


def check_endpoints(servers: Sequence[str]) -> list[str]:
    """The endpoints as given, each checked to be host:port (port 1..65535)."""
    if isinstance(servers, str):
        servers = [s for s in servers.split(",") if s]
    out = []
    for s in servers:
        host, sep, port = str(s).rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or "," in s:
            raise ValueError(f"RPC server {s!r}: expected host:port")
        out.append(str(s))
    if not out:
        raise ValueError("rpc_servers is empty")
    return out


def set_timeout(seconds: float | None) -> None:
    """Bound every later connection's sends and receives (llama.cpp reads it when connecting)."""
    if seconds is None:
        os.environ.setdefault("GGML_RPC_TIMEOUT_MS", str(int(DEFAULT_TIMEOUT * 1000)))
        return
    if not seconds > 0:
        raise ValueError(f"rpc_timeout must be > 0 seconds, got {seconds!r}")
    os.environ["GGML_RPC_TIMEOUT_MS"] = str(max(1, int(seconds * 1000)))


def rpc_server_binary() -> Path:
    """llama.cpp's ggml-rpc-server from the pinned tree pymtp is built from, built into the
    cache on first use ($PYMTP_RPC_SERVER: use that binary instead)."""
    env = os.environ.get("PYMTP_RPC_SERVER")
    if env:
        return Path(env)
    from .bench.llama_build import ensure_llama_tools

    return Path(ensure_llama_tools(tools=("ggml-rpc-server",))["bins"]["ggml-rpc-server"])
