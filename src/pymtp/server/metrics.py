"""Server counters and gauges, rendered in the Prometheus text exposition format (``GET /metrics``).

Written by hand rather than with ``prometheus-client``: the server exposes a dozen
counters and gauges of one process, which the text format (version 0.0.4) states in
a few lines, while prometheus-client would add a dependency to ``pymtp[server]`` and
its process-global default registry would mix the metrics of several apps in one
process (the tests run many). The tests parse the output with prometheus-client's
parser, so the format is checked by the reference implementation.

What is counted (all since the app started):

- ``pymtp_requests_total{endpoint, outcome}``: /v1 requests by outcome: ``ok``, ``cancelled``
  (the client went away before the end: a stream closed early, a dropped connection),
  ``client_error`` (4xx), ``rejected`` (503: every slot busy and ``max_queue`` requests waiting,
  or the server shutting down), ``server_error`` (other 5xx, or an error reported inside a stream).
- ``pymtp_generations_total``, ``pymtp_prompt_tokens_total``, ``pymtp_generated_tokens_total``,
  ``pymtp_draft_tokens_total``, ``pymtp_draft_tokens_accepted_total``: generations that ran to
  their end (one per choice) and their tokens; a cancelled generation is not counted.
- ``pymtp_generations_cancelled_total``: generations stopped because their client went away;
  ``pymtp_cancel_seconds_total`` and ``pymtp_cancel_seconds_max``: from the cancel to the freed slot;
  ``pymtp_cancel_steps_max``: the most steps a cancelled generation's slot still took part in after
  its cancel (the worker frees it before its next step: 0, or 1 when a step was running).
- ``pymtp_generations_timed_out_total``: generations the request timeout ended (finish_reason
  "length"; ``"pymtp": {"finish_reason": "timeout"}``); ``pymtp_steps_total``: the worker's steps.
- Gauges: ``pymtp_tokens_per_second`` and ``pymtp_draft_acceptance_rate`` over the last
  ``WINDOW`` finished generations (decode steps only, prefill excluded), ``pymtp_queue_depth``
  (generations waiting for a slot), ``pymtp_generations_running`` (holding a slot),
  ``pymtp_requests_in_flight`` (/v1 requests being answered, queued ones included).
"""

from __future__ import annotations

import threading
from collections import deque

from ..stats import GenerationResult

__all__ = ["ENDPOINTS", "Metrics", "CONTENT_TYPE", "OUTCOMES"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Finished generations the tokens/s and acceptance gauges average over.
WINDOW = 8
#: Endpoint labels (a bounded set); any other /v1 path is counted as "other".
ENDPOINTS = ("/v1/completions", "/v1/chat/completions", "/v1/models")
OUTCOMES = ("ok", "cancelled", "client_error", "rejected", "server_error")


class Metrics:
    """The server's counters (thread-safe: generations finish in worker threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str], int] = {}
        self.generations = self.prompt_tokens = self.generated_tokens = 0
        self.drafted = self.accepted = 0
        self.reused = self.restores = 0
        self.queue_depth = self.running = self.in_flight = 0
        self.steps = self.timed_out = 0
        self.cancelled = self.cancel_steps_max = 0
        self.cancel_seconds_sum = self.cancel_seconds_max = 0.0
        self.recent: deque[tuple[int, float, int, int]] = deque(maxlen=WINDOW)  # emitted, seconds, drafted, accepted

    # ---- recording ----

    def request_done(self, path: str, outcome: str) -> None:
        endpoint = path if path in ENDPOINTS else "/v1/models/{id}" if path.startswith("/v1/models/") else "other"
        with self._lock:
            key = (endpoint, outcome)
            self.requests[key] = self.requests.get(key, 0) + 1

    def generation_done(self, result: GenerationResult) -> None:
        s = result.stats
        with self._lock:
            self.generations += 1
            self.prompt_tokens += len(result.prompt_tokens)
            self.generated_tokens += len(result.tokens)
            self.drafted += s.n_drafted
            self.accepted += s.n_accepted
            self.reused += s.n_reused
            self.restores += s.reused_saved
            self.recent.append((s.n_emitted, s.t_total, s.n_drafted, s.n_accepted))

    def cancel_done(self, steps: int, seconds: float) -> None:
        """A cancelled generation left its slot steps steps and seconds s after its cancel."""
        with self._lock:
            self.cancelled += 1
            self.cancel_steps_max = max(self.cancel_steps_max, steps)
            self.cancel_seconds_sum += seconds
            self.cancel_seconds_max = max(self.cancel_seconds_max, seconds)

    def mean_generation_seconds(self) -> float:
        """The mean wall time of the last WINDOW finished generations (0 without any)."""
        with self._lock:
            recent = list(self.recent)
        return sum(r[1] for r in recent) / len(recent) if recent else 0.0

    def add(self, name: str, delta: int) -> None:
        """Move a gauge (queue_depth, running, in_flight) by delta."""
        with self._lock:
            setattr(self, name, getattr(self, name) + delta)

    # ---- reading ----

    def window(self) -> tuple[float, float]:
        """(tokens per second, acceptance rate) over the last WINDOW finished generations."""
        with self._lock:
            recent = list(self.recent)
        emitted, secs = sum(r[0] for r in recent), sum(r[1] for r in recent)
        drafted, accepted = sum(r[2] for r in recent), sum(r[3] for r in recent)
        return (emitted / secs if secs > 0 else 0.0), (accepted / drafted if drafted else 0.0)

    def render(self) -> str:
        """The Prometheus text format of every metric."""
        tps, acc = self.window()
        with self._lock:
            requests = dict(self.requests)
            counters = [
                ("pymtp_generations_total", "Generations (choices) that ran to their end.", self.generations),
                ("pymtp_prompt_tokens_total", "Prompt tokens of finished generations.", self.prompt_tokens),
                (
                    "pymtp_prompt_tokens_reused_total",
                    "Prompt tokens taken from a cache instead of decoded.",
                    self.reused,
                ),
                (
                    "pymtp_prompt_cache_restores_total",
                    "Generations that resumed another conversation's saved cache.",
                    self.restores,
                ),
                ("pymtp_generated_tokens_total", "Tokens generated by finished generations.", self.generated_tokens),
                ("pymtp_draft_tokens_total", "Draft tokens proposed in finished generations.", self.drafted),
                (
                    "pymtp_draft_tokens_accepted_total",
                    "Draft tokens the target accepted in finished generations.",
                    self.accepted,
                ),
                (
                    "pymtp_generations_cancelled_total",
                    "Generations stopped because their client went away.",
                    self.cancelled,
                ),
                (
                    "pymtp_cancel_seconds_total",
                    "Seconds from each cancel to its freed slot, added up.",
                    self.cancel_seconds_sum,
                ),
                ("pymtp_generations_timed_out_total", "Generations the request timeout ended.", self.timed_out),
                ("pymtp_steps_total", "Generation steps the worker ran (batched: one per batch).", self.steps),
            ]
            gauges = [
                (
                    "pymtp_tokens_per_second",
                    f"Decode tokens per second over the last {WINDOW} finished generations (prefill excluded).",
                    tps,
                ),
                (
                    "pymtp_draft_acceptance_rate",
                    f"Accepted / proposed draft tokens over the last {WINDOW} finished generations.",
                    acc,
                ),
                ("pymtp_queue_depth", "Generations waiting for a slot.", self.queue_depth),
                ("pymtp_generations_running", "Generations holding a slot now.", self.running),
                (
                    "pymtp_cancel_seconds_max",
                    "The longest time from a cancel to its freed slot.",
                    self.cancel_seconds_max,
                ),
                (
                    "pymtp_cancel_steps_max",
                    "The most steps a cancelled generation took part in after its cancel.",
                    self.cancel_steps_max,
                ),
                ("pymtp_requests_in_flight", "/v1 requests being answered (queued ones included).", self.in_flight),
            ]
        lines = [
            "# HELP pymtp_requests_total /v1 requests answered, by endpoint and outcome.",
            "# TYPE pymtp_requests_total counter",
        ]
        for (endpoint, outcome), n in sorted(requests.items()):
            lines.append(f'pymtp_requests_total{{endpoint="{endpoint}",outcome="{outcome}"}} {n}')
        for kind, rows in (("counter", counters), ("gauge", gauges)):
            for name, help_, value in rows:
                lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {_num(value)}"]
        return "\n".join(lines) + "\n"


def _num(v: float | int) -> str:
    return str(v) if isinstance(v, int) else repr(float(v))
