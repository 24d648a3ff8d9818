"""Runners: the server's generations, in one worker thread that owns the model's contexts.

Requests become Tickets (server.tickets) in a bounded queue; the worker takes their choices
as slots free up and runs them step by step. Between two steps it stops the generations whose
client went away (their slot is free before the next step) and ends those past their
request's deadline (finish_reason "length"). The event loop never waits for the model.

RunnerBase is that machinery; Runner (``--parallel 1``) runs one generation at a time on the
Session (whose prompt cache keeps several conversations), BatchRunner (server.batched) up to
n_seq together in batched steps.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import InvalidHandleError
from ..request import Request
from ..session import Session
from ..stats import GenerationResult, SpecStats
from ..textout import TextOutput
from .errors import REQUEST_ID
from .metrics import Metrics
from .tickets import Choice, GenerationFailed, RequestTimeout, ShuttingDown, Ticket, TicketQueue

__all__ = ["DEFAULT_MAX_QUEUE", "Job", "Runner", "RunnerBase"]

log = logging.getLogger("pymtp.server")

#: Requests that may wait for a slot by default (more get 503 with Retry-After).
DEFAULT_MAX_QUEUE = 64


@dataclass(frozen=True)
class Job:
    """One choice of a request: its prompt and its settings, resolved once (pymtp.request, on the
    event loop: cheap checks). prompt is called in the worker thread: tokenizing a long prompt
    does not block the loop."""

    prompt: Callable[[], list[int]]
    request: Request

    @property
    def speculative(self) -> bool:
        return self.request.speculative


class RunnerBase:
    """The queue, the worker thread and its lifetime; subclasses say how the worker runs."""

    thread_name = "pymtp-worker"

    def __init__(self, session: Session, metrics: Metrics | None, n_slots: int, max_queue: int) -> None:
        self.session = session
        self.metrics = metrics or Metrics()
        self.queue = TicketQueue(n_slots, max_queue, self.metrics)
        self.steps = 0  # steps the worker ran (read by cancel(), any thread)
        self.stop_at: float | None = None  # drain(timeout): when whatever still runs is ended
        self._start = threading.Lock()
        self._thread: threading.Thread | None = None

    # ---- the event loop's side ----

    def submit(self, jobs: list[Job], deadline: float | None = None) -> Ticket:
        """A Ticket for jobs (a request's choices), queued; raises QueueFull or ShuttingDown."""
        ticket = Ticket(jobs, asyncio.get_running_loop(), deadline)
        ticket.steps = lambda: self.steps
        ticket.request_id = REQUEST_ID.get()
        self.queue.put(ticket)
        self._ensure_worker()
        return ticket

    async def run_all(self, jobs: list[Job]) -> list[GenerationResult]:
        """The results of jobs (the first error is raised)."""
        return await self.submit(jobs).results()

    async def run(self, job: Job) -> GenerationResult:
        return (await self.run_all([job]))[0]

    def drain(self, timeout: float | None = None) -> None:
        """Take no new request (ShuttingDown); the ones in flight go on, for up to timeout seconds
        (then they end with a shutting-down error). Sets flags only: safe in a signal handler."""
        if timeout is not None and self.stop_at is None:
            self.stop_at = time.monotonic() + timeout
        self.queue.draining = True

    @property
    def draining(self) -> bool:
        return self.queue.draining or self.queue.closed

    def close(self, timeout: float = 30.0) -> bool:
        """Stop the worker: waiting requests get a shutting-down error, running generations are
        stopped after their step; the worker frees its contexts and ends. True once it has."""
        self.drain()
        self.stop_at = time.monotonic()
        for c in self.queue.close():
            c.ticket.put(c.index, "error", ShuttingDown("the server is shutting down"))
        with self._start:
            thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        if thread.is_alive():
            log.warning("the generation worker did not stop within %.0f s", timeout)
            return False
        return True

    # ---- the worker's side ----

    def _ensure_worker(self) -> None:
        with self._start:
            if self.queue.closed:
                return
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name=self.thread_name, daemon=True)
                self._thread.start()

    def _work(self) -> None:
        raise NotImplementedError

    def stopping(self, now: float) -> bool:
        """Whether the drain's time is up: what still runs ends now."""
        return self.stop_at is not None and now >= self.stop_at

    def _expire_waiting(self) -> None:
        """Requests past their deadline before any of their choices started: a clear error (and
        every waiting request once the drain's time is up)."""
        now = time.monotonic()
        if self.stopping(now):
            for c in self.queue.close():
                c.ticket.put(c.index, "error", ShuttingDown("the server is shutting down"))
            return
        for c in self.queue.expired(now):
            if c.ticket.started:  # its other choices run: this one ends empty, like them at the deadline
                c.ticket.put(c.index, "done", GenerationResult("", [], [], "timeout", SpecStats()))
            else:
                c.ticket.put(
                    c.index,
                    "error",
                    RequestTimeout(
                        "the request waited for a free slot until its deadline (the server's --request-timeout)"
                    ),
                )

    def _started(self, c: Choice, prompt: list[int]) -> None:
        c.ticket.started += 1
        c.ticket.prompt_tokens = len(prompt)

    def _report(self, c: Choice, out: TextOutput, piece: str) -> None:
        """Hand a step's text piece (and the logprobs of its tokens) to the request."""
        c.ticket.completion_tokens[c.index] = len(out.tokens)
        if not piece:
            return
        if c.job.request.wants_logprobs and len(out.token_logprobs) > c.reported:
            new = out.entries(c.reported)
            c.ticket.put(c.index, "logprobs", new)
            c.reported += len(new)
        c.ticket.put(c.index, "piece", piece)

    def _finished(self, c: Choice, result: GenerationResult) -> None:
        c.ticket.completion_tokens[c.index] = len(result.tokens)
        if result.finish_reason == "timeout":
            self.metrics.add("timed_out", 1)
        self.metrics.generation_done(result)
        c.ticket.put(c.index, "done", result)

    def _cancelled(self, c: Choice, n_tokens: int) -> None:
        """Record a generation stopped for its client, once its slot is free."""
        t = c.ticket
        c.ticket.completion_tokens[c.index] = n_tokens
        self.metrics.cancel_done(self.steps - t.cancel_step, time.monotonic() - (t.cancel_time or time.monotonic()))

    def _stepped(self) -> None:
        self.steps += 1
        self.metrics.add("steps", 1)

    def _step_failed(self, e: BaseException, choices: list[Choice]) -> GenerationFailed:
        """Log a failed step once (with the requests it took down); the error each of them gets."""
        ids = sorted({c.ticket.request_id or "-" for c in choices})
        log.error("a generation step failed (requests %s)", ", ".join(ids), exc_info=e)
        return GenerationFailed(f"the generation failed in the server: {type(e).__name__}: {e}")


class Runner(RunnerBase):
    """One generation at a time on the session (``--parallel 1``): its contexts and prompt cache,
    so a conversation that comes back resumes its saved cache. n choices run in turn."""

    thread_name = "pymtp-generate"

    def __init__(self, session: Session, metrics: Metrics | None = None, *, max_queue: int = DEFAULT_MAX_QUEUE) -> None:
        super().__init__(session, metrics, 1, max_queue)

    def _work(self) -> None:
        while True:
            self._expire_waiting()
            got = self.queue.take(1, wait=True)
            if got is None:
                return
            for c in got:
                try:
                    self._generate(c)
                finally:
                    self.queue.release()

    def _generate(self, c: Choice) -> None:
        """Run one choice step by step; the loop of pymtp.generate.TextStream, with a stop
        between steps for a cancel or the deadline."""
        job, ticket, session = c.job, c.ticket, self.session
        r = job.request
        try:
            prompt = job.prompt()
            logprobs = r.wants_logprobs
            constraint = r.new_constraint()
            with session.lock:
                sp = session.speculator(r.sampling, r.spec)
                session.generation += 1  # a paused stream on this session notices
                mine = session.generation
                sp.start(prompt, constraint=constraint, logprobs=logprobs, top_logprobs=r.top_logprobs)
            self._started(c, prompt)
            out = TextOutput(session, r.limits, logprobs=logprobs, top_logprobs=r.top_logprobs, constraint=constraint)
            while out.finish is None:
                now = time.monotonic()
                if ticket.cancelled:
                    self._cancelled(c, len(out.tokens))
                    return
                if self.stopping(now):
                    raise ShuttingDown("the server is shutting down")
                if ticket.expired(now):
                    self._report(c, out, out.end("timeout"))
                    break
                with session.lock:
                    if session.closed:
                        raise InvalidHandleError("the server's session was closed")
                    if session.generation != mine:
                        raise RuntimeError("another generation ran on the server's session")
                    if sp.room() < 1:
                        piece = out.end("context")
                    else:
                        try:
                            step = sp.step(max_new=out.remaining())
                        except Exception as e:  # noqa: BLE001 - the engine's failure, not the request's
                            raise self._step_failed(e, [c]) from e
                        piece = out.take(step, sp.room())
                self._stepped()
                self._report(c, out, piece)
            self._finished(c, out.result(prompt, sp.stats))
        except BaseException as e:  # noqa: BLE001 - handed to the request
            ticket.put(c.index, "error", e)
