"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with the right status.

`to_response` is the one responder: the exception handlers return it, and the pure ASGI
middlewares (body size limit, rate limit), which answer before FastAPI runs, call it as an ASGI
app (`send_error`), so every error body and header set is built the same way.

Follows the `Error` schema of openai-openapi (`code` and `param` are strings or null), unlike
vLLM's integer `code` and HTTP-phrase `type` (vllm#12886). Every failure a client can cause
maps to a 4xx here; a 500 means a bug in the gateway and is logged with its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

log = logging.getLogger(__name__)

INVALID_REQUEST = "invalid_request_error"


class APIError(Exception):
    """An error answered to the client as an OpenAI error object."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = INVALID_REQUEST,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)


def error_body(
    message: str, *, type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": _scrub(message), "type": type, "param": _scrub(param),
                      "code": code}}


def _scrub(text: str | None) -> str | None:
    """Messages and params echo client input, which may hold lone surrogates (valid JSON
    escapes, not Unicode): the UTF-8 response encoder would raise on them (a 500)."""
    return None if text is None else text.encode("utf-8", "replace").decode("utf-8")


def invalid_request(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(message, status=400, param=param, code=code)


def model_not_found(model: str) -> APIError:
    return APIError(
        f"The model `{model}` does not exist.", status=404, param="model", code="model_not_found"
    )


def overloaded(retry_after_s: int = 1) -> APIError:
    return APIError(
        "The server is overloaded: the request queue is full. Retry later.",
        status=429,
        type="rate_limit_error",
        code="overloaded",
        headers={"Retry-After": str(retry_after_s)},
    )


def rate_limited(*, rps: float, retry_after_s: int) -> APIError:
    """This client's token bucket is empty (`overloaded` is the server's queue: same shape)."""
    return APIError(
        f"Rate limit reached: at most {rps:g} requests per second for this client. "
        f"Retry after {retry_after_s} s.",
        status=429,
        type="rate_limit_error",
        code="rate_limit_exceeded",
        headers={"Retry-After": str(retry_after_s)},
    )


def body_too_large_message(limit: int) -> str:
    return f"The request body exceeds the limit of {limit} bytes."


def request_too_large(limit: int) -> APIError:
    # Connection: close, because the unread body is still on the wire.
    return APIError(body_too_large_message(limit), status=413, code="request_too_large",
                    headers={"Connection": "close"})


def admin_disabled() -> APIError:
    return APIError(
        "The admin API is disabled: start the server with an admin key "
        "(--admin-key or HEDGESPEC_ADMIN_KEY).",
        status=403,
        type="permission_error",
        code="admin_disabled",
    )


def registry_unavailable(reason: str | None) -> APIError:
    return APIError(f"The drafter registry is unavailable: {reason or 'not started'}.",
                    status=503, type="server_error", code="registry_unavailable")


def not_ready(reason: str) -> APIError:
    return APIError(
        f"The server is not ready: {reason}", status=503, type="server_error", code="not_ready"
    )


def request_timeout(timeout_s: float) -> APIError:
    return APIError(
        f"The request exceeded the server's deadline of {timeout_s:g} s.",
        status=408,
        type="timeout_error",
        code="request_timeout",
    )


def context_length_exceeded(
    *, max_context: int, prompt_tokens: int, max_tokens: int, param: str
) -> APIError:
    what = "messages" if param == "messages" else "prompt"
    return invalid_request(
        f"This model's maximum context length is {max_context} tokens. However, you requested "
        f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the {what}, {max_tokens} in "
        f"the completion). Please reduce the length of the {what} or completion.",
        param=param,
        code="context_length_exceeded",
    )


def loc_to_param(loc: Sequence[int | str]) -> str | None:
    """("body", "messages", 0, "content") -> "messages[0].content"; the body itself -> None."""
    sources = ("body", "query", "path", "header", "cookie")
    parts = list(loc[1:]) if loc and loc[0] in sources else list(loc)
    param = ""
    for part in parts:
        if isinstance(part, int):
            param += f"[{part}]"
        elif not str(part).startswith("function-"):  # pydantic union branch tags
            param += f".{part}" if param else str(part)
    return param or None


def validation_error(exc: RequestValidationError) -> APIError:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    if first.get("type") == "json_invalid":
        return invalid_request("The request body is not valid JSON.", code="invalid_json")
    param = loc_to_param(first.get("loc", ()))
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if first.get("type") == "missing":
        message = f"Missing required parameter: '{param}'." if param else "Missing request body."
        return invalid_request(message, param=param, code="missing_required_parameter")
    message = f"Invalid value for '{param}': {msg}" if param else f"Invalid request body: {msg}"
    return invalid_request(message, param=param, code="invalid_value")


def _status_error(status: int, detail: str) -> APIError:
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    if status == 404:
        return APIError(detail or "Not found.", status=404, code="not_found")
    if status == 413:
        return APIError(detail or phrase, status=413, code="request_too_large")
    if status == 405:
        return APIError(detail or phrase, status=405, code="method_not_allowed")
    kind = "server_error" if status >= 500 else INVALID_REQUEST
    return APIError(detail or phrase, status=status, type=kind)


def to_response(err: APIError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


async def send_error(err: APIError, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer `err` from a pure ASGI middleware, before any route or exception handler runs."""
    await to_response(err)(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    """Map every exception class to an OpenAI error body."""

    async def on_api_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, APIError)
        return to_response(exc)

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return to_response(validation_error(exc))

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        err = _status_error(exc.status_code, str(exc.detail) if exc.detail else "")
        if exc.headers:
            err.headers = dict(exc.headers)
        return to_response(err)

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return to_response(
            APIError("Internal server error.", status=500, type="server_error", code=None)
        )

    app.add_exception_handler(APIError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
