"""The app without a loaded engine: liveness vs readiness, 503 shapes, CORS, 404/405 shapes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gateway.app import create_app
from gateway.config import Settings


@pytest.fixture
def app_settings(tmp_path: Path) -> Settings:
    return Settings(
        pool=tmp_path / "missing-pool.json",
        database_url=f"sqlite:///{tmp_path / 'reg.db'}",
        cors_origins=["http://ui.example"],
        warmup=False,
    )


@pytest.fixture
def http(app_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(app_settings)) as client:
        runner = client.app.state.runner  # type: ignore[attr-defined]
        runner._thread.join(10)  # the load fails fast: the pool file is missing
        yield client


def test_liveness_is_independent_of_the_engine(http: TestClient) -> None:
    assert http.get("/health").json() == {"status": "ok"}
    ready = http.get("/ready")
    assert ready.status_code == 503
    assert ready.json()["error"]["code"] == "not_ready"
    assert "missing-pool.json" in ready.json()["error"]["message"]


def test_generation_while_not_ready_is_503(http: TestClient) -> None:
    resp = http.post(
        "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
    )
    assert resp.status_code == 503 and resp.json()["error"]["type"] == "server_error"
    assert http.get("/v1/models").status_code == 503


def test_cors_only_for_configured_origins(http: TestClient) -> None:
    preflight = {"Origin": "http://ui.example", "Access-Control-Request-Method": "POST"}
    ok = http.options("/v1/chat/completions", headers=preflight)
    assert ok.headers["access-control-allow-origin"] == "http://ui.example"
    other = http.options(
        "/v1/chat/completions", headers={**preflight, "Origin": "http://evil.example"}
    )
    assert "access-control-allow-origin" not in other.headers


def test_cors_is_off_by_default(tmp_path: Path) -> None:
    settings = Settings(pool=tmp_path / "none.json", database_url=f"sqlite:///{tmp_path / 'r.db'}")
    with TestClient(create_app(settings)) as client:
        resp = client.get("/health", headers={"Origin": "http://ui.example"})
        assert "access-control-allow-origin" not in resp.headers


def test_unknown_routes_and_methods_use_the_error_shape(http: TestClient) -> None:
    missing = http.get("/v1/nothing-here")
    assert missing.status_code == 404 and set(missing.json()["error"]) == {
        "message",
        "type",
        "param",
        "code",
    }
    wrong = http.get("/v1/chat/completions")
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


def test_a_registry_outage_is_reported_but_keeps_the_replica_ready(
    pool_file: Path, tmp_path: Path
) -> None:
    """Generation never needs the registry, and all replicas share it: /ready stays 200 (so a
    load balancer keeps every replica) and says the registry is unreachable."""
    settings = Settings(
        pool=pool_file, warmup=False, hf_cache_dir=tmp_path / "hf",
        database_url="postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2",
    )
    with TestClient(create_app(settings)) as client:
        deadline = time.monotonic() + 60
        while (ready := client.get("/ready")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready.status_code == 200, ready.text
        assert ready.json()["registry"].startswith("unreachable: ")
        assert ready.json()["status"] == "ready"
