"""The HTTP edge of every request: its id, its outcome and access line, the body limit.

RequestMiddleware (outermost):

- ``x-request-id``: the client's (a short token of letters, digits and ``._:-``) or a new
  ``req_<hex>``; it goes back in the response and in every log line about the request.
- One access line per request (logger ``pymtp.access``; INFO, /health and /metrics at DEBUG):
  client, method and path, status, outcome, tokens (prompt+completion), seconds, id.
- The outcome counted in /metrics (``pymtp_requests_total``): from the status and whether the
  response went out whole; ``cancelled`` when the client went away first.
- A client that goes away (ClientGone, raised by the routes; starlette's ClientDisconnect) and
  a request the server's shutdown cancels end silently: client behaviour is no error. Any other
  exception is logged once, with the id, and answered with a 500 naming it when nothing was sent.

BodyLimitMiddleware (inside the API key check, so an unauthenticated client gets its 401 before
any body is read): a /v1 body is read whole up to max_body bytes (413 beyond it) and before the
request's deadline (408), then handed to the route.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Callable, MutableMapping
from typing import Any

from starlette.requests import ClientDisconnect

from .errors import REQUEST_ID, APIError
from .metrics import Metrics

__all__ = ["BodyLimitMiddleware", "ClientGone", "RequestMiddleware"]

access_log = logging.getLogger("pymtp.access")
log = logging.getLogger("pymtp.server")

_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
#: How much of an oversized body is read and dropped before the 413, so that a client that
#: sends its whole body before reading gets the answer rather than a reset connection.
DRAIN_BYTES = 64 << 20


class ClientGone(Exception):
    """The client closed its connection before its response (raised by a route)."""


def _header(scope: dict[str, Any], name: bytes) -> bytes | None:
    return next((v for k, v in scope.get("headers", ()) if k == name), None)


def _request_id(scope: dict[str, Any]) -> str:
    given = _header(scope, b"x-request-id")
    if given is not None:
        text = given.decode("latin-1")
        if _CLIENT_ID.fullmatch(text):
            return text
    return "req_" + uuid.uuid4().hex[:24]


class RequestMiddleware:
    """Ids, access lines, outcomes and exceptions (see the module's docstring)."""

    def __init__(self, app: Callable, metrics: Metrics, request_timeout: float | None = None) -> None:
        self.app, self.metrics, self.request_timeout = app, metrics, request_timeout

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.monotonic()
        rid = _request_id(scope)
        token = REQUEST_ID.set(rid)
        state = scope.setdefault("state", {})
        state["pymtp_request_id"] = rid
        state["pymtp_deadline"] = t0 + self.request_timeout if self.request_timeout else None
        api = scope["path"].startswith("/v1")
        status: int | None = None
        complete = gone = counted = False

        def count() -> None:
            """Count the request once in /metrics: at its last body message (before the client can
            see the end of the response, so a client reading /metrics next finds it counted), or
            when the app returns."""
            nonlocal counted
            if counted or not api:
                return
            counted = True
            self.metrics.add("in_flight", -1)
            self.metrics.request_done(scope["path"], self._outcome(state, status, complete, gone))

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            nonlocal status, complete
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), (b"x-request-id", rid.encode())]}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                complete = True
                count()
            await send(message)

        if api:
            self.metrics.add("in_flight", 1)
        try:
            await self.app(scope, receive, send_with_id)
        except APIError as e:  # the body limit's 413 / 408
            if status is None:
                await e.response()(scope, receive, send_with_id)
        except (ClientGone, ClientDisconnect):
            gone = True
        except asyncio.CancelledError:
            # uvicorn cancels the requests still running at the end of --shutdown-timeout; this is
            # the end of the request's task, and the cancel was the server's own doing: no traceback.
            gone = True
        except Exception as e:  # noqa: BLE001 - a bug: logged once, with the id
            log.error("request %s: unexpected error", rid, exc_info=e)
            if status is None:
                err = APIError(500, f"internal error: {type(e).__name__} (request id {rid})", type_="server_error")
                await err.response()(scope, receive, send_with_id)
        finally:
            ticket = state.get("pymtp_ticket")
            if ticket is not None:  # however the request ended, its generations stop (a no-op once done)
                ticket.cancel()
            count()
            self._access_line(scope, state, status, self._outcome(state, status, complete, gone), t0, rid)
            REQUEST_ID.reset(token)

    @staticmethod
    def _outcome(state: dict[str, Any], status: int | None, complete: bool, gone: bool) -> str:
        if gone:
            return "cancelled"
        override = state.get("pymtp_outcome")
        if override:
            return override
        if status is None:
            return "server_error"
        if status == 503:
            return "rejected"
        if status >= 500:
            return "server_error"
        if status >= 400:
            return "client_error"
        return "ok" if complete else "cancelled"

    @staticmethod
    def _access_line(scope, state, status, outcome, t0, rid) -> None:
        path = scope["path"]
        level = logging.DEBUG if path in ("/health", "/metrics") else logging.INFO
        if not access_log.isEnabledFor(level):
            return
        client = scope.get("client")
        who = f"{client[0]}:{client[1]}" if client else "-"
        ticket = state.get("pymtp_ticket")
        tokens = "{}+{} tokens ".format(*ticket.usage()) if ticket is not None else ""
        access_log.log(
            level,
            '%s "%s %s" %s %s %s%.3f s %s',
            who,
            scope["method"],
            path,
            status or "-",
            outcome,
            tokens,
            time.monotonic() - t0,
            rid,
        )


class BodyLimitMiddleware:
    """Reads a /v1 request's body up to max_body bytes and before its deadline, then replays it."""

    def __init__(self, app: Callable, max_body: int) -> None:
        self.app, self.max_body = app, max_body

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1") or scope["method"] not in ("POST", "PUT"):
            await self.app(scope, receive, send)
            return
        deadline = scope.get("state", {}).get("pymtp_deadline")
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            body = await asyncio.wait_for(self._read(scope, receive), timeout)
        except asyncio.TimeoutError:
            raise APIError(
                408,
                "the request body did not arrive before the request timeout",
                code="timeout",
                headers={"Connection": "close"},
            ) from None
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: waits for the client to go away

        await self.app(scope, replay, send)

    async def _read(self, scope: dict[str, Any], receive: Callable) -> bytes:
        declared = _header(scope, b"content-length")
        try:
            declared_n = int(declared) if declared is not None else None
        except ValueError:
            raise APIError(400, "the Content-Length header is not a number") from None
        chunks, size, more = [], 0, True
        too_large = declared_n is not None and declared_n > self.max_body
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            more = message.get("more_body", False)
            size += len(chunk)
            if size > self.max_body:
                too_large = True
            if too_large:
                if size > DRAIN_BYTES:  # enough: the client gets a closed connection
                    break
                continue  # read and drop the rest: the client then reads the 413
            chunks.append(chunk)
        if too_large:
            raise APIError(
                413,
                f"the request body is larger than the server's limit of {self.max_body} bytes (pymtp serve --max-body)",
                code="request_too_large",
                headers={"Connection": "close"},
            )
        return b"".join(chunks)
