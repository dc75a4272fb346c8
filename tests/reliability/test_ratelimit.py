"""The per-client token bucket (gateway/http/ratelimit.py): arithmetic with a fake clock, identity
rules, and the middleware's 429 in a real app (the real-server test is in test_security.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.app import create_app
from gateway.config import Settings
from gateway.errors import rate_limited, to_response
from gateway.http.keys import KeySet
from gateway.http.ratelimit import RateLimit, TokenBucket, default_burst


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_sustained_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(2.0, 3, clock=clock)
    assert [bucket.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take("a") == pytest.approx(0.5)  # one token every 0.5 s
    clock.now += 0.5
    assert bucket.take("a") == 0.0
    assert bucket.take("a") > 0
    clock.now += 100  # a long quiet period refills to the burst, never beyond
    assert [bucket.take("a") for _ in range(4)][-1] > 0


def test_clients_are_independent_and_the_table_is_bounded() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1.0, 1, max_clients=3, clock=clock)
    assert bucket.take("a") == 0.0 and bucket.take("a") > 0
    assert bucket.take("b") == 0.0  # a's empty bucket does not touch b
    for i in range(10):
        bucket.take(f"c{i}")
    assert len(bucket) == 3


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(0.1, 100), burst=st.integers(1, 20),
    gaps=st.lists(st.floats(0, 2), min_size=1, max_size=80),
)  # fmt: skip
def test_never_more_than_burst_plus_rate_times_elapsed(
    rate: float, burst: int, gaps: list[float]
) -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate, burst, clock=clock)
    start, allowed = clock.now, 0
    for gap in gaps:
        clock.now += gap
        wait = bucket.take("k")
        assert wait >= 0
        allowed += wait == 0.0
        assert allowed <= burst + rate * (clock.now - start) + 1e-6
    # A refused client that waits the advertised time is served.
    while (wait := bucket.take("k")) == 0.0:
        pass
    clock.now += wait
    assert bucket.take("k") == 0.0


def test_default_burst() -> None:
    assert default_burst(0.2) == 1 and default_burst(2.5) == 3


def _scope(token: str | None, ip: str = "10.0.0.1") -> dict[str, object]:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return {"type": "http", "path": "/v1/models", "headers": headers, "client": (ip, 1234)}


def test_identity_is_the_accepted_key_else_the_address() -> None:
    limiter = RateLimit(lambda *a: None, rps=1, burst=1, keys=KeySet(["sk-good"]))  # type: ignore[arg-type]
    good = limiter.client_id(_scope("sk-good"))
    assert good.startswith("key:") and "sk-good" not in good
    # Wrong or missing keys share the address's bucket: rotating made-up keys does not help.
    assert (limiter.client_id(_scope("made-up-1")) == limiter.client_id(_scope(None))
            == "ip:10.0.0.1")
    open_mode = RateLimit(lambda *a: None, rps=1, burst=1, keys=KeySet([]))  # type: ignore[arg-type]
    assert open_mode.client_id(_scope("anything")) == "ip:10.0.0.1"


def test_the_429_is_built_by_the_one_error_responder() -> None:
    """Byte for byte what the app's exception handlers would answer, Retry-After included."""
    import asyncio

    limiter = RateLimit(lambda *a: None, rps=1, burst=1, keys=KeySet([]))  # type: ignore[arg-type]
    limiter.buckets.take(limiter.client_id(_scope(None)))  # the one token of the burst
    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    asyncio.run(limiter(_scope(None), None, send))  # type: ignore[arg-type]
    expected = to_response(rate_limited(rps=1, retry_after_s=1))
    assert sent[0]["status"] == 429 and sent[0]["headers"] == expected.raw_headers
    assert sent[1]["body"] == expected.body


def test_middleware_answers_openai_429_only_on_v1(tmp_path: Path) -> None:
    settings = Settings(
        pool=tmp_path / "missing.json", database_url=f"sqlite:///{tmp_path / 'r.db'}",
        api_keys=["sk-a", "sk-b"], rate_limit_rps=0.01, rate_limit_burst=2, warmup=False,
    )  # fmt: skip
    http = TestClient(create_app(settings))  # no lifespan: auth and limits need no engine
    a = {"Authorization": "Bearer sk-a"}
    first = [http.get("/v1/models", headers=a).status_code for _ in range(2)]
    assert 429 not in first  # 503: the engine is not loaded, but the request got through
    limited = http.get("/v1/models", headers=a)
    assert limited.status_code == 429
    assert limited.json() == {"error": {
        "message": limited.json()["error"]["message"], "type": "rate_limit_error",
        "param": None, "code": "rate_limit_exceeded",
    }}  # fmt: skip
    assert int(limited.headers["retry-after"]) >= 1
    assert http.get("/v1/models", headers={"Authorization": "Bearer sk-b"}).status_code != 429
    assert all(http.get("/health").status_code == 200 for _ in range(5))  # never limited
    assert b'hedgespec_requests_rejected_total{reason="rate_limited"} 1.0' in http.get(
        "/metrics"
    ).content


def test_off_by_default(tmp_path: Path) -> None:
    settings = Settings(pool=tmp_path / "m.json", database_url=f"sqlite:///{tmp_path / 'r.db'}")
    http = TestClient(create_app(settings))
    assert settings.rate_limit_rps is None
    assert all(http.get("/v1/models").status_code != 429 for _ in range(30))
