"""BatchRunner: concurrent requests share batched speculative steps (pymtp.batch).

The worker thread owns a Batch of n_seq slots. Between steps it admits waiting choices into
the free slots (continuous batching: a request joins at the next step, a finished one leaves
at once), frees the slots of cancelled requests and ends those past their deadline, then runs
one batched step for all the others and hands each request its text pieces. The choices of a
request (n > 1) run together, and a cancel stops them all.
"""

from __future__ import annotations

import time

from ..batch import Batch, BatchItem
from ..session import Session
from .metrics import Metrics
from .runner import DEFAULT_MAX_QUEUE, RunnerBase
from .tickets import Choice, ShuttingDown

__all__ = ["BatchRunner"]


class BatchRunner(RunnerBase):
    """Runs up to n_seq generations together on session's model (n_ctx positions each)."""

    thread_name = "pymtp-batch"

    def __init__(
        self,
        session: Session,
        metrics: Metrics | None = None,
        *,
        n_seq: int = 4,
        n_ctx: int | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
    ) -> None:
        super().__init__(session, metrics, n_seq, max_queue)
        self.n_seq = n_seq
        self.n_ctx = n_ctx or session.n_ctx
        self.max_batch = 0  # the most texts one step has carried so far

    def _work(self) -> None:
        try:
            batch = Batch(self.session, self.n_seq, n_ctx=self.n_ctx, spec=None)
        except BaseException as e:  # noqa: BLE001 - no contexts: every request hears why
            while (got := self.queue.take(self.n_seq, wait=True)) is not None:
                for c in got:
                    self.queue.release()
                    c.ticket.put(c.index, "error", e)
            return
        live: dict[int, tuple[BatchItem, Choice]] = {}
        try:
            while True:
                self._expire_waiting()
                got = self.queue.take(batch.free, wait=not live)  # waits only when idle
                if got is None:
                    break
                for c in got:
                    self._admit(batch, c, live)
                    self._stop(batch, live)  # a prefill takes a while: the cancels that came meanwhile
                if not got:
                    self._stop(batch, live)
                if live:
                    self._step(batch, live)
        finally:
            for item, c in list(live.values()):
                batch.cancel(item)
                self.queue.release()
                c.ticket.put(c.index, "error", ShuttingDown("the server is shutting down"))
            batch.close()

    def _admit(self, batch: Batch, c: Choice, live: dict) -> None:
        r = c.job.request
        try:
            with self.session.lock:  # the model's tokenizer, and nobody else decoding meanwhile
                prompt = c.job.prompt()
                item = batch.add(
                    prompt,
                    sampling=r.sampling,
                    spec=r.spec,
                    limits=r.limits,
                    constraint=r.new_constraint(),
                    logprobs=r.wants_logprobs,
                    top_logprobs=r.top_logprobs,
                )
        except BaseException as e:  # noqa: BLE001 - handed to the request
            self.queue.release()
            c.ticket.put(c.index, "error", e)
            return
        self._started(c, prompt)
        live[item.seq_id] = (item, c)

    def _leave(self, live: dict, seq: int) -> None:
        del live[seq]
        self.queue.release()

    def _stop(self, batch: Batch, live: dict) -> None:
        """Free the slots of cancelled requests; end the generations past their deadline (all of
        them once the drain's time is up)."""
        now = time.monotonic()
        stopping = self.stopping(now)
        for seq, (item, c) in list(live.items()):
            if stopping:
                batch.cancel(item)
                self._leave(live, seq)
                c.ticket.put(c.index, "error", ShuttingDown("the server is shutting down"))
            elif c.ticket.cancelled:
                batch.cancel(item)
                self._leave(live, seq)
                self._cancelled(c, len(item.out.tokens))
            elif c.ticket.expired(now):
                sent = item.out.sent
                batch.cancel(item, "timeout")  # flushes the held text: send it
                self._leave(live, seq)
                self._report(c, item.out, item.out.text[sent:])
                self._finished(c, item.result)

    def _step(self, batch: Batch, live: dict) -> None:
        self.max_batch = max(self.max_batch, len(live))
        try:
            with self.session.lock:
                pieces = batch.step()
        except BaseException as e:  # noqa: BLE001 - every text in the step fails alike
            err = self._step_failed(e, [c for _, c in live.values()])
            for seq, (item, c) in list(live.items()):
                batch.cancel(item, "error")
                self._leave(live, seq)
                c.ticket.put(c.index, "error", err)
            return
        self._stepped()
        for item, piece in pieces:
            c = live[item.seq_id][1]
            self._report(c, item.out, piece)
        for seq, (item, c) in list(live.items()):
            if item.finished:
                self._leave(live, seq)  # the gauges are exact before the outcome is handed over
                self._finished(c, item.result)
