"""What every part of the bench shares: its error, its log line and its fixed settings."""

from __future__ import annotations

import os
import sys

SCHEMA = "pymtp-bench/1"
N_CTX = 2048
SMOKE_TOKENS = 8


class BenchError(RuntimeError):
    """A benchmark setup problem with an actionable message."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def n_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
