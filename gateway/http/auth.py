"""API keys: client keys for `/v1/*`, a separate admin key for `/admin/*`.

Keys are attached per router as dependencies (not by URL prefix, which is how vLLM left
`/invocations` open). The configured keys are `gateway.http.keys.KeySet`s (hashed, compared in
constant time), read through `gateway.http.deps` like every other per-app object.

When no client key is configured `/v1/*` is open (local use). The admin API is never open:
with no admin key configured it answers 403.
"""

from __future__ import annotations

from fastapi import Request

from gateway.errors import APIError, admin_disabled
from gateway.http.deps import AdminKeysDep, ApiKeysDep
from gateway.http.keys import digest


def bearer_token(request: Request) -> str | None:
    """The key from `Authorization: Bearer <key>` (what the OpenAI SDKs send)."""
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def key_scope(request: Request) -> str:
    """A short, stable name for the presented API key (a digest prefix, never the key), so
    per-client state such as learner sessions cannot be shared between keys; "" without one."""
    token = bearer_token(request)
    return digest(token).hex()[:16] if token else ""


def _unauthorized(message: str) -> APIError:
    return APIError(
        message,
        status=401,
        type="invalid_request_error",
        code="invalid_api_key",
        headers={"WWW-Authenticate": "Bearer"},
    )


async def require_api_key(request: Request, keys: ApiKeysDep) -> None:
    """Dependency for `/v1/*`."""
    if not keys.enabled:
        return
    token = bearer_token(request)
    if token is None:
        raise _unauthorized(
            "You didn't provide an API key. Provide it in the Authorization header "
            "(Authorization: Bearer YOUR_KEY)."
        )
    if not keys.accepts(token):
        raise _unauthorized("Incorrect API key provided.")


async def require_admin_key(request: Request, keys: AdminKeysDep) -> None:
    """Dependency for `/admin/*`: the admin key only, and never open."""
    if not keys.enabled:
        raise admin_disabled()
    if not keys.accepts(bearer_token(request)):
        raise _unauthorized("Incorrect or missing admin key.")
