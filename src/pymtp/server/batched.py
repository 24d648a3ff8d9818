"""BatchRunner: concurrent requests share batched speculative steps (pymtp.batch).

One worker thread owns a Batch of n_seq slots. Requests wait in an inbox; between steps the
worker admits as many as there are free slots (continuous batching: a request joins at the
next step, a finished one leaves at once), runs one batched step for all of them, and hands
each request's text pieces to its event loop. A request whose client went away is cancelled
at the next step. The interface is Runner's: ``stream(job)``, ``run(job)``, ``stream_choices(jobs)``
(whose choices run together).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import deque
from dataclasses import dataclass
from typing import AsyncIterator, Callable

from ..batch import Batch, BatchItem
from ..session import Session
from .metrics import Metrics
from .runner import Job, RunnerBase

__all__ = ["BatchRunner"]


@dataclass
class _Request:
    job: Job
    put: Callable[[tuple], None]            # hands an event to the request's event loop
    cancel: threading.Event
    reported: int = 0                       # tokens whose logprobs went out already


class BatchRunner(RunnerBase):
    """Runs up to n_seq generations together on session's model (n_ctx positions each)."""

    def __init__(self, session: Session, metrics: Metrics | None = None, *, n_seq: int = 4,
                 n_ctx: int | None = None) -> None:
        self.session = session
        self.metrics = metrics or Metrics()
        self.n_seq = n_seq
        self.n_ctx = n_ctx or session.n_ctx
        self._inbox: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._start = threading.Lock()
        self._thread: threading.Thread | None = None
        self.max_batch = 0                    # the most texts one step has carried so far

    # ---- the event-loop side ---------------------------------------------------------------------

    async def stream(self, job: Job) -> AsyncIterator[tuple[str, object]]:
        """("piece", str) ... then ("done", GenerationResult) or ("error", exception); with
        job.logprobs, ("logprobs", [(token, logprob, top), ...]) before a piece. Closing the
        iterator early cancels the generation at the next step."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()
        self.metrics.add("queue_depth", 1)
        self._inbox.put(_Request(job, lambda item: loop.call_soon_threadsafe(events.put_nowait, item), cancel))
        self._ensure_worker()
        try:
            while True:
                item = await events.get()
                yield item
                if item[0] in ("done", "error"):
                    return
        finally:
            cancel.set()

    async def stream_choices(self, jobs: list[Job]) -> AsyncIterator[tuple[int, str, object]]:
        """(choice index, kind, value) of every job's stream, as they come: the choices run
        together. Stops after an error; closing it early cancels them all."""
        merged: asyncio.Queue = asyncio.Queue()
        streams = [self.stream(j) for j in jobs]

        async def pump(i: int, items) -> None:
            async for kind, value in items:
                await merged.put((i, kind, value))

        tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
        try:
            left = len(jobs)
            while left:
                i, kind, value = await merged.get()
                yield i, kind, value
                if kind == "error":
                    return
                if kind == "done":
                    left -= 1
        finally:
            for t in tasks:
                t.cancel()
            for s in streams:
                await s.aclose()

    # ---- the worker --------------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        with self._start:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="pymtp-batch", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        waiting: deque[_Request] = deque()
        live: dict[int, tuple[BatchItem, _Request]] = {}
        try:
            batch = Batch(self.session, self.n_seq, n_ctx=self.n_ctx, spec=None)
        except BaseException as e:  # noqa: BLE001 - no contexts: every request hears why
            while True:
                req = self._inbox.get()
                self.metrics.add("queue_depth", -1)
                req.put(("error", e))
        try:
            while True:
                try:                    # wait for work only when there is none
                    waiting.append(self._inbox.get(block=not live and not waiting, timeout=None))
                    while True:
                        waiting.append(self._inbox.get_nowait())
                except queue.Empty:
                    pass
                while waiting and batch.free:
                    self._admit(batch, waiting.popleft(), live)
                for seq, (item, req) in list(live.items()):
                    if req.cancel.is_set():
                        batch.cancel(item)
                        self._finish(live, seq, None)
                if live:
                    self._step(batch, live)
        finally:
            batch.close()

    def _admit(self, batch: Batch, req: _Request, live: dict) -> None:
        self.metrics.add("queue_depth", -1)
        if req.cancel.is_set():
            return
        job = req.job
        try:
            with self.session.lock:      # the model's tokenizer, and nobody else decoding meanwhile
                item = batch.add(job.prompt(), sampling=job.sampling, spec=job.spec, limits=job.limits,
                                 constraint=job.constraint() if job.constraint else None, logprobs=job.logprobs,
                                 top_logprobs=job.top_logprobs)
        except BaseException as e:  # noqa: BLE001 - handed to the request
            req.put(("error", e))
            return
        self.metrics.add("running", 1)
        live[item.seq_id] = (item, req)

    def _step(self, batch: Batch, live: dict) -> None:
        self.max_batch = max(self.max_batch, len(live))
        try:
            with self.session.lock:
                pieces = batch.step()
        except BaseException as e:  # noqa: BLE001 - every text in the step fails alike
            for seq, (item, req) in list(live.items()):
                batch.cancel(item, "error")
                self._finish(live, seq, ("error", e))
            return
        for item, piece in pieces:
            req = live[item.seq_id][1]
            out = item.out
            if piece:
                if req.job.logprobs and len(out.token_logprobs) > req.reported:
                    new = out.entries(req.reported)
                    req.put(("logprobs", new))
                    req.reported += len(new)
                req.put(("piece", piece))
        for seq, (item, req) in list(live.items()):
            if item.finished:
                self.metrics.generation_done(item.result)
                self._finish(live, seq, ("done", item.result))

    def _finish(self, live: dict, seq: int, event: tuple | None) -> None:
        _, req = live.pop(seq)
        self.metrics.add("running", -1)
        if event is not None:
            req.put(event)
