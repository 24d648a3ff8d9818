"""A request's generations between the event loop and a runner's worker thread.

A Ticket is one request (its n choices): the worker hands it events (text pieces, logprobs,
each choice's result or an error), the event loop reads them with ``next()``, and either side
can end it: ``cancel()`` (the client went away, or the request stopped reading) is a plain
flag, so it is safe in a ``finally`` of a task being cancelled, and the worker stops the
ticket's generations before its next step.

The TicketQueue holds the choices waiting for a slot. It is bounded in requests: a request
that would have to wait while ``max_queue`` others already wait is refused (QueueFull), and
once the server drains (SIGTERM) every new request is refused (ShuttingDown).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .metrics import Metrics

if TYPE_CHECKING:
    from ..stats import GenerationResult
    from .runner import Job

__all__ = ["Choice", "GenerationFailed", "QueueFull", "RequestTimeout", "ShuttingDown", "Ticket", "TicketQueue"]


class QueueFull(Exception):
    """Every slot is taken and max_queue requests wait already."""

    def __init__(self, waiting: int) -> None:
        super().__init__(f"{waiting} requests are waiting for a slot")
        self.waiting = waiting


class ShuttingDown(Exception):
    """The server is draining: it finishes what it has and takes nothing new."""


class RequestTimeout(Exception):
    """A request reached its deadline before any of its choices got a slot."""


class GenerationFailed(Exception):
    """A step failed inside the engine (not the request's doing): the worker logged it once."""


class Ticket:
    """One request's generations (its n choices), as the event loop and the worker see them.

    Events are (choice index, kind, value): ("piece", str), ("logprobs", [(token, logprob,
    tops), ...]) before a piece, then ("done", GenerationResult) or ("error", exception)."""

    def __init__(self, jobs: list[Job], loop: asyncio.AbstractEventLoop, deadline: float | None = None) -> None:
        self.jobs = jobs
        self.deadline = deadline  # time.monotonic() past which the request stops
        self.request_id: str | None = None  # for the worker's log
        self._loop = loop
        self._events: asyncio.Queue = asyncio.Queue()
        self._left = len(jobs)  # choices whose outcome was not read yet
        self._failed = False
        self.cancelled = False  # set once, by cancel()
        self.cancel_time: float | None = None
        self.cancel_step = 0  # the worker's step count when it was cancelled
        self.steps = lambda: 0  # the worker's step counter (set by the runner)
        self.started = 0  # choices that got a slot (worker side)
        self.prompt_tokens = 0  # for the access log (worker side)
        self.completion_tokens = [0] * len(jobs)

    # ---- the worker's side ----

    def put(self, index: int, kind: str, value: Any) -> None:
        """Hand an event to the event loop (from any thread)."""
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, (index, kind, value))
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    # ---- the event loop's side ----

    def cancel(self) -> None:
        """Stop every generation of the request before the worker's next step (idempotent;
        a no-op once every outcome was read)."""
        if self.cancelled or self._left == 0:
            return
        self.cancel_step = self.steps()
        self.cancel_time = time.monotonic()
        self.cancelled = True

    async def next(self) -> tuple[int, str, Any] | None:
        """The next event, or None once every choice is done or an error was read."""
        if self._left == 0 or self._failed:
            return None
        item = await self._events.get()
        if item[1] == "done":
            self._left -= 1
        elif item[1] == "error":
            self._failed = True
        return item

    async def results(self) -> list[GenerationResult]:
        """Every choice's result, in order (the first error is raised). Cancels the rest when
        interrupted."""
        out: list = [None] * len(self.jobs)
        try:
            while (item := await self.next()) is not None:
                index, kind, value = item
                if kind == "error":
                    raise value
                if kind == "done":
                    out[index] = value
            return out
        finally:
            self.cancel()

    def usage(self) -> tuple[int, int]:
        """(prompt tokens, completion tokens of every choice) so far: the access log's count."""
        return self.prompt_tokens, sum(self.completion_tokens)


@dataclass
class Choice:
    """One choice of a ticket, on the worker's side."""

    ticket: Ticket
    index: int
    job: Job
    reported: int = 0  # tokens whose logprobs went out already


class TicketQueue:
    """Choices waiting for one of n_slots slots; at most max_queue requests wait (see QueueFull)."""

    def __init__(self, n_slots: int, max_queue: int, metrics: Metrics | None = None) -> None:
        if max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {max_queue}")
        self.n_slots, self.max_queue = n_slots, max_queue
        self.metrics = metrics or Metrics()  # its queue_depth and running gauges follow this queue
        self._cond = threading.Condition()
        self._pending: deque[Choice] = deque()
        self._waiting: dict[int, int] = {}  # id(ticket) -> its choices still pending
        self.running = 0  # choices taken and not released (holding a slot)
        self.draining = False  # set without the lock: a signal handler may set it
        self.closed = False

    # ---- the event loop's side ----

    def put(self, ticket: Ticket) -> None:
        """Queue ticket's choices, or raise ShuttingDown / QueueFull."""
        if self.draining or self.closed:
            raise ShuttingDown("the server is shutting down")
        with self._cond:
            free = self.n_slots - self.running - len(self._pending)
            if free < 1 and len(self._waiting) >= self.max_queue:
                raise QueueFull(len(self._waiting))
            self._pending.extend(Choice(ticket, i, job) for i, job in enumerate(ticket.jobs))
            self._waiting[id(ticket)] = len(ticket.jobs)
            self.metrics.add("queue_depth", len(ticket.jobs))
            self._cond.notify()

    @property
    def depth(self) -> int:
        """Choices waiting for a slot."""
        return len(self._pending)

    @property
    def waiting_requests(self) -> int:
        return len(self._waiting)

    # ---- the worker's side ----

    def take(self, n: int, wait: bool) -> list[Choice] | None:
        """Up to n waiting choices, in order (with wait, blocks until there is one); None once
        the queue is closed. Each one holds a slot until release(). Choices of cancelled
        tickets are dropped."""
        with self._cond:
            while wait and not self._pending and not self.closed:
                self._cond.wait()
            if self.closed:
                return None
            out: list = []
            while self._pending and len(out) < n:
                c = self._pending.popleft()
                self._left_pending(c.ticket)
                if not c.ticket.cancelled:
                    out.append(c)
            self.running += len(out)
            self.metrics.add("running", len(out))
            return out

    def release(self) -> None:
        """A taken choice left its slot (finished, cancelled, or failed to start)."""
        with self._cond:
            self.running -= 1
            self.metrics.add("running", -1)

    def expired(self, now: float) -> list[Choice]:
        """Take out the waiting choices whose request is past its deadline."""
        with self._cond:
            late = [c for c in self._pending if c.ticket.expired(now)]
            if late:
                self._pending = deque(c for c in self._pending if not c.ticket.expired(now))
                for c in late:
                    self._left_pending(c.ticket)
            return late

    def _left_pending(self, ticket: Ticket) -> None:
        self.metrics.add("queue_depth", -1)
        key = id(ticket)
        self._waiting[key] -= 1
        if not self._waiting[key]:
            del self._waiting[key]

    def close(self) -> list[Choice]:
        """Stop the worker (take returns None) and take out every waiting choice."""
        with self._cond:
            self.closed = True
            left = list(self._pending)
            self._pending.clear()
            self._waiting.clear()
            self.metrics.add("queue_depth", -len(left))
            self._cond.notify_all()
            return left
