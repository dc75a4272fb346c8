"""Stored responses on PostgreSQL: an id this server could never have minted (a NUL byte,
which PostgreSQL refuses in text, or longer than the column) is a 404 on every route, as on
SQLite, never a 500 from the database."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from bench.harness.postgres import POSTGRES_ENV, fresh_postgres_database, url_string
from bench.harness.server import ServerProcess
from tests.gateway.conftest import API_KEY

# Read at import: the suite's isolation fixtures clear HEDGESPEC_* variables around each test.
ADMIN_URL = os.environ.get(POSTGRES_ENV)
pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240),
              pytest.mark.skipif(ADMIN_URL is None,
                                 reason=f"{POSTGRES_ENV} is not set (.ci/postgres.sh sets it)")]


def test_ids_the_database_cannot_hold_are_404s(pool_file: Path, tmp_path: Path) -> None:
    assert ADMIN_URL is not None
    with fresh_postgres_database(ADMIN_URL) as url:
        proc = ServerProcess.start(pool_file, tmp_path / "pg", "--api-key", API_KEY,
                                   "--database-url", url_string(url))
        try:
            with httpx.Client(base_url=f"{proc.base_url}/v1", timeout=30,
                              headers={"Authorization": f"Bearer {API_KEY}"}) as http:
                for rid in ("resp_%00x", "resp_" + "a" * 80):
                    for method, path in (("GET", ""), ("DELETE", ""), ("GET", "/input_items"),
                                         ("POST", "/cancel")):
                        r = http.request(method, f"/responses/{rid}{path}")
                        assert r.status_code == 404, (method, path, r.text)
                        assert r.json()["error"]["code"] == "not_found", r.text
        finally:
            proc.stop()
