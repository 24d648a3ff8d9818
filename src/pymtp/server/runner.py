"""The runner: one generation at a time on the server's Session, each in a worker thread.

The event loop stays responsive while a generation runs; requests queue on an
asyncio lock that the worker thread releases only when its generation has really
ended, so a client that disconnects mid-stream cannot make two generations
overlap on the session's contexts. A request for n choices runs n jobs in turn
(``stream_choices``); each takes the lock for itself.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import AsyncIterator, Callable

from ..config import GenerationConfig, SamplingConfig, SpecConfig
from ..generate import TextStream
from ..session import Session
from ..stats import GenerationResult
from .metrics import Metrics

__all__ = ["Job", "Runner", "RunnerBase"]


@dataclass
class Job:
    """What one request asks for, resolved and validated (cheap checks, on the event loop).

    prompt is called in the worker thread: tokenizing a long prompt does not block the loop."""

    prompt: Callable[[], list[int]]
    sampling: SamplingConfig
    spec: SpecConfig | None           # None: plain decoding
    limits: GenerationConfig
    constraint: Callable[[], object] | None = None    # a fresh TokenConstraint per generation
    logprobs: bool = False                            # the chosen tokens' log probabilities
    top_logprobs: int = 0                             # and the likeliest tokens of each row

    @property
    def speculative(self) -> bool:
        return self.spec is not None


class RunnerBase:
    """What a runner offers the app besides stream(job): run(job) and run_all(jobs)."""

    def stream(self, job: Job) -> AsyncIterator[tuple[str, object]]:
        raise NotImplementedError

    async def run(self, job: Job) -> GenerationResult:
        """Run job to its end; its result (or its exception, raised here)."""
        last: tuple[str, object] = ("error", RuntimeError("the generation ended without a result"))
        async for last in self.stream(job):   # runs to the end: the last item is the outcome
            pass
        kind, value = last
        if kind == "error":
            raise value
        return value

    async def run_all(self, jobs: list[Job]) -> list[GenerationResult]:
        """The results of jobs (the first error is raised)."""
        return list(await asyncio.gather(*(self.run(j) for j in jobs)))


class Runner(RunnerBase):
    """Serializes generations on a Session; each runs in its own worker thread."""

    def __init__(self, session: Session, metrics: Metrics | None = None) -> None:
        self.session = session
        self.lock = asyncio.Lock()
        self.metrics = metrics or Metrics()

    async def run_all(self, jobs: list[Job]) -> list[GenerationResult]:
        """The results of jobs, run in turn (the first error is raised)."""
        return [await self.run(job) for job in jobs]

    async def stream(self, job: Job) -> AsyncIterator[tuple[str, object]]:
        """("piece", str) ... then ("done", GenerationResult) or ("error", exception); with
        job.logprobs, ("logprobs", [(token, logprob), ...]) before a piece, for the tokens
        generated since the last one.

        Closing the iterator early stops the generation after its current step."""
        loop = asyncio.get_running_loop()
        metrics = self.metrics
        metrics.add("queue_depth", 1)
        try:
            await self.lock.acquire()
        finally:
            metrics.add("queue_depth", -1)
        metrics.add("running", 1)
        queue: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()

        def put(item) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            s, end = None, None
            try:
                s = TextStream(self.session, job.prompt(), job.sampling, job.spec, job.limits,
                               constraint=job.constraint() if job.constraint else None, logprobs=job.logprobs,
                               top_logprobs=job.top_logprobs)
                reported = 0                  # tokens whose logprobs went out with earlier pieces
                for piece in s:
                    if cancel.is_set():
                        break
                    if job.logprobs and len(s.token_logprobs) > reported:
                        new = s.out.entries(reported)
                        put(("logprobs", new))
                        reported += len(new)
                    put(("piece", piece))
                else:
                    metrics.generation_done(s.result)
                    end = ("done", s.result)
            except BaseException as e:  # noqa: BLE001 - handed to the event loop
                end = ("error", e)
            finally:
                if s is not None:
                    try:
                        s.close()
                    except Exception:  # pragma: no cover
                        pass
                metrics.add("running", -1)          # before the outcome is handed over: gauges are exact then
                if end is not None:
                    put(end)
                loop.call_soon_threadsafe(self.lock.release)

        try:
            threading.Thread(target=work, name="pymtp-generate", daemon=True).start()
        except BaseException:
            metrics.add("running", -1)
            self.lock.release()
            raise
        try:
            while True:
                item = await queue.get()
                yield item
                if item[0] in ("done", "error"):
                    return
        finally:
            cancel.set()

    async def stream_choices(self, jobs: list[Job]) -> AsyncIterator[tuple[int, str, object]]:
        """(choice index, kind, value) of each job's stream in turn; stops after an error.

        Closing it early stops the running generation and starts no other."""
        for i, job in enumerate(jobs):
            items = self.stream(job)
            try:
                async for kind, value in items:
                    yield i, kind, value
                    if kind == "error":
                        return
            finally:
                await items.aclose()
