"""The optional API key: with one set, every /v1 request needs ``Authorization: Bearer <key>``.

An ASGI middleware rather than a route dependency, so a request without the key is
refused before its body is read or parsed (an unauthenticated client learns nothing
about the body's problems). Paths outside /v1 (``/health``, ``/metrics``, ``/docs``)
stay open.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from .errors import APIError

__all__ = ["ApiKeyMiddleware", "check_api_key"]


def check_api_key(key: str | None) -> str | None:
    """key, checked: None or "" means no key; otherwise it must be printable ASCII without spaces."""
    if not key:
        return None
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        raise ValueError("the API key must be printable ASCII without spaces")
    return key


class ApiKeyMiddleware:
    """Answers 401 (OpenAI's body, code ``invalid_api_key``) to /v1 requests without the key."""

    def __init__(self, app: Callable, api_key: str) -> None:
        self.app = app
        self.expected = api_key.encode()

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1"):
            given = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
            if given is None or not self.matches(given):
                what = "no API key was given" if given is None else "the API key is incorrect"
                err = APIError(
                    401,
                    f"{what}: send the header 'Authorization: Bearer <key>' with the key "
                    "the server was started with (--api-key or PYMTP_API_KEY)",
                    code="invalid_api_key",
                )
                response = err.response()
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def matches(self, header: bytes) -> bool:
        """Whether an Authorization header carries the key (the scheme is case-insensitive)."""
        scheme, _, token = header.strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.expected)
