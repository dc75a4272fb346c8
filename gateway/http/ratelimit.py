"""Per-client rate limit for `/v1/*`: a token bucket per API key (or per client address).

Settings: `rate_limit_rps` (sustained requests per second; None turns the limiter off) and
`rate_limit_burst` (bucket size: requests accepted at once after a quiet period; default
`max(1, ceil(rps))`). Each request to `/v1/*` takes one token; an empty bucket answers

    429 {"error": {"message": ..., "type": "rate_limit_error", "param": null,
                   "code": "rate_limit_exceeded"}}   with   Retry-After: <seconds>

which is the shape of the queue-full 429 (`gateway.errors.overloaded`, code `overloaded`), so
clients and the OpenAI SDKs back off the same way; the code tells the two apart: a rate limit
is this client's fault, `overloaded` is the server's.

Who is a client:

- a request carrying an accepted client key is limited per key (the bucket is keyed by the
  key's SHA-256, the key itself is never stored);
- every other request (keys not configured, no key, a wrong key) is limited per client address
  (`scope["client"]`; behind a reverse proxy that is the proxy unless uvicorn trusts its
  `X-Forwarded-For`: `FORWARDED_ALLOW_IPS`). A wrong key never gets a bucket of its own, so
  rotating made-up keys neither escapes the limit nor grows the table.

The check is a pure ASGI middleware that runs before the body is read, so a limited client
costs the server almost nothing. Only `/v1/*` is limited: health probes, metrics scrapes and
the admin API (one operator, behind its own key) are not.

Memory is bounded: at most `max_clients` buckets are kept; beyond that the least recently seen
client's bucket is dropped (it starts again with a full bucket, which is only ever in the
client's favour, never a false 429).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import rate_limited, send_error
from gateway.http.keys import KeySet
from gateway.metrics import GatewayMetrics

LIMITED_PREFIX = "/v1/"
MAX_CLIENTS = 10_000
EPSILON = 1e-9  # float slack on refills


@dataclass
class _Bucket:
    tokens: float
    updated: float


class TokenBucket:
    """Token buckets by client id: `rate` tokens per second, at most `burst` stored."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = float(rate)
        self.burst = int(burst)
        self.max_clients = max_clients
        self._clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, client: str) -> float:
        """Take one token for `client`: 0.0 when allowed, else seconds until one is available."""
        now = self._clock()
        bucket = self._buckets.get(client)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
            self._buckets[client] = bucket
            if len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(client)
            elapsed = max(0.0, now - bucket.updated)
            bucket.tokens = min(float(self.burst), bucket.tokens + elapsed * self.rate)
            bucket.updated = now
        if bucket.tokens >= 1.0 - EPSILON:  # a client that waited the advertised time
            bucket.tokens = max(0.0, bucket.tokens - 1.0)
            return 0.0
        return (1.0 - bucket.tokens) / self.rate


def default_burst(rps: float) -> int:
    return max(1, math.ceil(rps))


class RateLimit:
    """ASGI middleware: the token bucket in front of `/v1/*`."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        rps: float,
        burst: int | None,
        keys: KeySet,
        metrics: GatewayMetrics | None = None,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self.app = app
        self.keys = keys
        self.metrics = metrics
        self.buckets = TokenBucket(
            rps, burst if burst is not None else default_burst(rps), max_clients=max_clients
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(LIMITED_PREFIX):
            await self.app(scope, receive, send)
            return
        wait_s = self.buckets.take(self.client_id(scope))
        if wait_s <= 0.0:
            await self.app(scope, receive, send)
            return
        if self.metrics is not None:
            self.metrics.rejected.labels(reason="rate_limited").inc()
        err = rate_limited(rps=self.buckets.rate, retry_after_s=max(1, math.ceil(wait_s)))
        await send_error(err, scope, receive, send)

    def client_id(self, scope: Scope) -> str:
        token = _bearer(scope)
        if token is not None and self.keys.enabled and self.keys.accepts(token):
            return "key:" + hashlib.sha256(token.encode("utf-8")).hexdigest()
        client = scope.get("client")
        return "ip:" + (str(client[0]) if client else "unknown")


def _bearer(scope: Scope) -> str | None:
    """As `gateway.http.auth.bearer_token`, from raw ASGI headers (latin-1, as Starlette does)."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None
