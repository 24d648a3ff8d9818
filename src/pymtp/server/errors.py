"""API errors and their JSON bodies ({"error": {"message", "type", "param", "code"}}).

An unexpected exception (a bug, not the client's doing) is logged once, with the id of the
request it broke (REQUEST_ID, set by server.access), and answered with a 500 naming that id.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import ContextFullError, PymtpError, UnsupportedError
from .tickets import GenerationFailed, QueueFull, RequestTimeout, ShuttingDown

__all__ = [
    "APIError",
    "REQUEST_ID",
    "bad_request",
    "from_exception",
    "install_error_handlers",
    "overloaded",
    "shutting_down",
    "validation_error",
]

log = logging.getLogger("pymtp.server")

#: The id of the request being answered (its x-request-id), for the log.
REQUEST_ID: ContextVar[str | None] = ContextVar("pymtp_request_id", default=None)


class APIError(Exception):
    """An error answered to the client with an HTTP status and an OpenAI-style error body."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        type_: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.type, self.code = status, message, param, type_, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(status_code=self.status, content=self.body(), headers=self.headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param, code=code)


def validation_error(errors: Sequence[Mapping[str, Any]]) -> APIError:
    """A 400 naming the first invalid field (param) and listing every problem."""
    msgs, param = [], None
    for err in errors:
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        if param is None and loc:
            param = ".".join(loc)
        msgs.append(f"{'.'.join(loc) or 'body'}: {err.get('msg', 'invalid')}")
    return bad_request("; ".join(msgs) or "invalid request", param)


def overloaded(message: str, retry_after: float, code: str = "server_overloaded") -> APIError:
    """A 503 telling the client to come back in retry_after seconds (the Retry-After header)."""
    return APIError(
        503, message, type_="server_error", code=code, headers={"Retry-After": str(max(1, math.ceil(retry_after)))}
    )


def shutting_down() -> APIError:
    return APIError(
        503,
        "the server is shutting down: send the request to another instance or retry later",
        type_="server_error",
        code="shutting_down",
        headers={"Connection": "close"},
    )


def from_exception(e: BaseException) -> APIError:
    """The API error for an exception raised while preparing or running a generation."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, ValidationError):
        return validation_error(e.errors())
    if isinstance(e, (ValueError, UnsupportedError, ContextFullError)):
        return bad_request(str(e))
    if isinstance(e, ShuttingDown):
        return shutting_down()
    if isinstance(e, RequestTimeout):
        return overloaded(f"{e}; retry later", 1, code="timeout")
    if isinstance(e, QueueFull):
        return overloaded(f"the server is busy ({e}); retry later", 1)
    rid = REQUEST_ID.get()
    if isinstance(e, GenerationFailed):  # logged by the worker already
        return APIError(500, f"{e} (request id {rid})", type_="server_error")
    if isinstance(e, PymtpError):
        return APIError(500, str(e), type_="server_error")
    log.error("request %s: unexpected error", rid or "-", exc_info=e)
    return APIError(500, f"internal error: {type(e).__name__}: {e} (request id {rid})", type_="server_error")


def install_error_handlers(app: FastAPI) -> None:
    """Answer API errors, invalid bodies (400, not FastAPI's 422) and HTTP errors in the OpenAI shape."""

    @app.exception_handler(APIError)
    async def api_error(request: Request, e: APIError):
        return e.response()

    @app.exception_handler(RequestValidationError)
    async def request_validation(request: Request, e: RequestValidationError):
        return validation_error(list(e.errors())).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException):
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return APIError(e.status_code, str(e.detail), type_=kind).response()
