"""gateway/http/middleware.py as plain ASGI: the arrival clock and the body size limit, driven with
scripted `receive`/`send` and an inner app that records what reached it."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from gateway.errors import request_too_large, to_response
from gateway.http.middleware import ArrivalClock, BodySizeLimit, BodyTooLarge

LIMIT = 10


class Inner:
    """An app that reads its whole body and answers 200; records what it saw."""

    def __init__(self) -> None:
        self.called = False
        self.body = b""
        self.arrival_at_call: float | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.called = True
        self.arrival_at_call = scope.get("state", {}).get("arrival")
        if scope["type"] != "http":
            return
        while True:
            message = await receive()
            self.body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def http_scope(content_length: str | None = None) -> Scope:
    headers = [(b"host", b"x")]
    if content_length is not None:
        headers.append((b"content-length", content_length.encode()))
    return {"type": "http", "method": "POST", "path": "/v1/completions", "headers": headers}


def run(app: Any, scope: Scope, chunks: list[bytes]) -> list[Message]:
    """Runs `app` with the body sent in `chunks`; returns what it sent."""
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
               for i, c in enumerate(chunks)]  # fmt: skip
    sent: list[Message] = []

    async def receive() -> Message:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def test_a_declared_length_over_the_limit_is_refused_unread() -> None:
    inner = Inner()
    sent = run(BodySizeLimit(inner, LIMIT), http_scope(str(LIMIT + 1)), [b"x" * (LIMIT + 1)])
    assert not inner.called
    start, body = sent
    assert start["status"] == 413
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"connection"] == b"close"
    assert int(headers[b"content-length"]) == len(body["body"])
    err = json.loads(body["body"])["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert (err["type"], err["code"]) == ("invalid_request_error", "request_too_large")
    assert str(LIMIT) in err["message"]


def test_the_413_is_built_by_the_one_error_responder() -> None:
    """Byte for byte what the app's exception handlers would answer for the same error."""
    sent = run(BodySizeLimit(Inner(), LIMIT), http_scope(str(LIMIT + 1)), [b""])
    expected = to_response(request_too_large(LIMIT))
    assert sent[0]["headers"] == expected.raw_headers and sent[1]["body"] == expected.body


@pytest.mark.parametrize("declared", [str(LIMIT), None, "not-a-number"])
def test_a_body_at_the_limit_passes_whole(declared: str | None) -> None:
    inner = Inner()
    sent = run(BodySizeLimit(inner, LIMIT), http_scope(declared), [b"12345", b"67890"])
    assert inner.body == b"1234567890" and sent[0]["status"] == 200


@pytest.mark.parametrize("declared", [None, "not-a-number", "3"])
def test_a_body_that_grows_past_the_limit_raises_413_as_it_arrives(declared: str | None) -> None:
    """No (or a lying) Content-Length: counted chunk by chunk; the chunk that crosses the
    limit raises the HTTPException FastAPI passes through as a 413."""
    inner = Inner()
    with pytest.raises(BodyTooLarge) as err:
        run(BodySizeLimit(inner, LIMIT), http_scope(declared), [b"123456", b"78901", b"x"])
    assert err.value.status_code == 413
    assert inner.body == b"123456"  # the crossing chunk never reached the app


def test_non_http_scopes_pass_through_the_size_limit() -> None:
    inner = Inner()
    run(BodySizeLimit(inner, LIMIT), {"type": "lifespan"}, [])
    assert inner.called


def test_arrival_is_stamped_before_the_app_runs() -> None:
    inner = Inner()
    before = time.monotonic()
    scope = http_scope()
    run(ArrivalClock(inner), scope, [b"{}"])
    assert inner.arrival_at_call is not None
    assert before <= inner.arrival_at_call <= time.monotonic()
    assert scope["state"]["arrival"] == inner.arrival_at_call


def test_arrival_keeps_existing_state_and_skips_other_scopes() -> None:
    scope = {**http_scope(), "state": {"other": 1}}
    run(ArrivalClock(Inner()), scope, [b""])
    assert scope["state"]["other"] == 1 and "arrival" in scope["state"]
    lifespan: Scope = {"type": "lifespan"}
    run(ArrivalClock(Inner()), lifespan, [])
    assert "state" not in lifespan
