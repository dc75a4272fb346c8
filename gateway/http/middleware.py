"""Pure ASGI middlewares: the request body size limit and the arrival clock.

Arrival is stamped before the body is read, so time-to-first-token and latency metrics count
everything the gateway adds.

A declared `Content-Length` over the limit is refused before the body is read; a chunked body
is counted as it arrives. Both answer 413 in the OpenAI error shape: the streamed case raises
an `HTTPException` subclass from `receive`, which FastAPI passes through its body parsing
unchanged (any other exception there would become a generic 400).
"""

from __future__ import annotations

import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import body_too_large_message, request_too_large, send_error


class ArrivalClock:
    """Stores `time.monotonic()` at arrival in `scope["state"]["arrival"]`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope.setdefault("state", {})["arrival"] = time.monotonic()
        await self.app(scope, receive, send)


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, body_too_large_message(limit))


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.limit = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await send_error(request_too_large(self.limit), scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
