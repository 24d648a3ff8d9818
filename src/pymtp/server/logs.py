"""The server's log output: a handler that never blocks the event loop.

A server's stderr may be a pipe that nobody reads (a supervisor that does not drain it, a
detached terminal). A plain StreamHandler then blocks inside write() once the pipe is full,
and with it the event loop: the server stops answering, /health included. LogWriter formats a
record on the caller's thread and hands the line to a writer thread through a bounded queue;
when stderr is stuck, lines are dropped (and counted: the next line that goes out says how
many) instead of stopping the server. The writer uses its own duplicate of the file
descriptor and os.write, so it holds no lock that sys.stderr's users or the interpreter's exit
would wait for.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading

__all__ = ["LogWriter", "configure", "unconfigure"]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogWriter(logging.Handler):
    """Writes formatted records to fd (default: stderr's) from a daemon thread; at most
    capacity lines wait, more are dropped."""

    def __init__(self, fd: int | None = None, capacity: int = 4096) -> None:
        super().__init__()
        self.fd = os.dup(sys.stderr.fileno() if fd is None else fd)
        self.lines: queue.Queue[str | None] = queue.Queue(capacity)
        self.dropped = 0
        self._closing = False
        self.thread = threading.Thread(target=self._write, name="pymtp-log", daemon=True)
        self.thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
        except Exception:  # noqa: BLE001 - a record that does not format is dropped, not printed
            self.dropped += 1
            return
        try:
            self.lines.put_nowait(line)
        except queue.Full:
            self.dropped += 1

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        self.dropped += 1  # never the default: a traceback on sys.stderr, which may block

    def _write(self) -> None:
        while (line := self.lines.get()) is not None:
            if self.dropped:
                n, self.dropped = self.dropped, 0
                line = f"pymtp: {n} log lines dropped (stderr was not being read)\n" + line
            data = line.encode("utf-8", "replace")
            try:
                while data:
                    data = data[os.write(self.fd, data) :]
            except OSError:  # the reader is gone (EPIPE): nothing more can be written
                self.dropped += 1

    def close(self, timeout: float = 2.0) -> None:
        """Write what waits (for up to timeout seconds: a stuck stderr is left behind, the thread
        is a daemon) and close. Once: logging's exit hook calls it again."""
        if self._closing:
            return
        self._closing = True
        try:
            self.lines.put(None, timeout=timeout)
        except queue.Full:
            pass
        self.thread.join(timeout)
        if not self.thread.is_alive():
            os.close(self.fd)
        super().close()


def configure(level: str = "info") -> LogWriter | None:
    """Send the server's logs (pymtp's and uvicorn's) through a LogWriter on stderr, unless the
    process configured logging already (the root logger has handlers: they are left alone)."""
    root = logging.getLogger()
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    if root.handlers:
        return None
    writer = LogWriter()
    writer.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(writer)
    root.setLevel(level.upper())
    return writer


def unconfigure(writer: LogWriter | None, timeout: float = 1.0) -> None:
    if writer is not None:
        logging.getLogger().removeHandler(writer)
        writer.close(timeout)
