"""API keys: client keys for `/v1/*`, a separate admin key for `/admin/*`.

Keys are attached per router as dependencies (not by URL prefix, which is how vLLM left
`/invocations` open). Presented keys are hashed and compared against every configured key's
hash with `hmac.compare_digest`, so neither the comparison nor the number of keys checked
leaks timing. Keys are held as `SecretStr` and never logged.

When no client key is configured `/v1/*` is open (local use). The admin API is never open:
with no admin key configured it answers 403.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from fastapi import Request
from pydantic import SecretStr

from gateway.http.errors import APIError


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class KeySet:
    """A set of accepted keys, stored only as SHA-256 digests."""

    def __init__(self, keys: Iterable[SecretStr | str]) -> None:
        raw = [k.get_secret_value() if isinstance(k, SecretStr) else k for k in keys]
        self._digests = [_digest(k) for k in raw if k]

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def accepts(self, presented: str | None) -> bool:
        if presented is None:
            return False
        candidate = _digest(presented)
        matched = False
        for digest in self._digests:  # no early exit: constant work per configured key
            matched |= hmac.compare_digest(candidate, digest)
        return matched

    def __repr__(self) -> str:
        return f"KeySet({len(self._digests)} keys)"


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
    return _digest(token).hex()[:16] if token else ""


def _unauthorized(message: str) -> APIError:
    return APIError(
        message,
        status=401,
        type="invalid_request_error",
        code="invalid_api_key",
        headers={"WWW-Authenticate": "Bearer"},
    )


async def require_api_key(request: Request) -> None:
    """Dependency for `/v1/*`."""
    keys: KeySet = request.app.state.api_keys
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


async def require_admin_key(request: Request) -> None:
    """Dependency for `/admin/*`: the admin key only, and never open."""
    keys: KeySet = request.app.state.admin_keys
    if not keys.enabled:
        raise APIError(
            "The admin API is disabled: start the server with an admin key "
            "(--admin-key or HEDGESPEC_ADMIN_KEY).",
            status=403,
            type="permission_error",
            code="admin_disabled",
        )
    if not keys.accepts(bearer_token(request)):
        raise _unauthorized("Incorrect or missing admin key.")
