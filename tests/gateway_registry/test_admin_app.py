"""The admin pool API in process, without a model: refused without an admin key, 503 when the
registry database is unreachable, and a registry that works while the engine failed to load."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gateway.app import create_app
from gateway.config import Settings
from tests.conftest import SUITE_ENV
from tests.gateway_registry.conftest import ADMIN, ADMIN_KEY

ROUTES = [("GET", "/admin/api/drafters"), ("POST", "/admin/api/drafters"),
          ("PATCH", "/admin/api/drafters/x"), ("DELETE", "/admin/api/drafters/x"),
          ("POST", "/admin/api/drafters/x/retry"), ("GET", "/admin/api/events"),
          ("GET", "/admin/api/pool")]


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No developer `.env` or HEDGESPEC_* variable may leak into Settings()."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("HEDGESPEC_") and n not in SUITE_ENV]:
        monkeypatch.delenv(name)


def client(tmp_path: Path, **settings: object) -> TestClient:
    options: dict[str, object] = dict(pool=tmp_path / "missing.json", warmup=False,
                                      database_url=f"sqlite:///{tmp_path / 'r.db'}",
                                      hf_cache_dir=tmp_path / "hf")
    options.update(settings)
    return TestClient(create_app(Settings(**options)))  # type: ignore[arg-type]


def test_without_an_admin_key_the_pool_api_is_refused(tmp_path: Path) -> None:
    with client(tmp_path) as http:
        for method, path in ROUTES:
            resp = http.request(method, path, headers=ADMIN, json={"enabled": False})
            assert resp.status_code == 403, (method, path)
            assert resp.json()["error"]["code"] == "admin_disabled"


def test_an_unreachable_registry_answers_503(tmp_path: Path) -> None:
    url = "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2"
    with client(tmp_path, admin_key=ADMIN_KEY, database_url=url) as http:
        for method, path in ROUTES:
            resp = http.request(method, path, headers=ADMIN,
                                json={"name": "x", "source": "local", "path": "/x"})
            if resp.status_code == 400:  # PATCH's body is checked first; send a valid one
                resp = http.request(method, path, headers=ADMIN, json={"enabled": False})
            assert resp.status_code == 503, (method, path, resp.text)
            error = resp.json()["error"]
            assert error["code"] == "registry_unavailable" and "unavailable" in error["message"]


def test_a_registry_that_comes_up_after_start_is_picked_up(tmp_path: Path) -> None:
    """The database is unreachable at start (here: its directory cannot be created, a file is
    in the way); once that is fixed the gateway opens it on a retry, without a restart."""
    blocker = tmp_path / "dbdir"
    blocker.write_text("not a directory")
    with client(tmp_path, admin_key=ADMIN_KEY,
                database_url=f"sqlite:///{blocker / 'r.db'}") as http:
        resp = http.get("/admin/api/drafters", headers=ADMIN)
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "registry_unavailable"
        blocker.unlink()
        blocker.mkdir()
        deadline = time.monotonic() + 30
        while (resp := http.get("/admin/api/drafters", headers=ADMIN)).status_code != 200:
            assert time.monotonic() < deadline, resp.text
            time.sleep(0.2)
        assert resp.json()["count"] == 0
        assert (blocker / "r.db").exists()


@pytest.fixture
def no_engine(tmp_path: Path) -> Iterator[TestClient]:
    with client(tmp_path, admin_key=ADMIN_KEY) as http:
        http.app.state.runner._thread.join(10)  # type: ignore[attr-defined]
        yield http


def test_the_registry_works_while_the_engine_failed_to_load(no_engine: TestClient) -> None:
    assert no_engine.get("/ready").status_code == 503
    body = no_engine.get("/admin/api/drafters", headers=ADMIN).json()
    assert body == {"data": [], "count": 0, "pool_version": body["pool_version"]}
    resp = no_engine.post("/admin/api/drafters", headers=ADMIN,
                          json={"name": "Orphan", "source": "local", "path": "/nonexistent/d"})
    assert resp.status_code == 202 and resp.json()["id"] == "orphan"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = no_engine.get("/admin/api/drafters/orphan", headers=ADMIN).json()
        if row["status"] == "failed":
            break
        time.sleep(0.1)
    assert row["status"] == "failed" and "not found" in row["error"], row
    pool = no_engine.get("/admin/api/pool", headers=ADMIN).json()
    assert pool["serving"] == [] and pool["synced_version"] is None
