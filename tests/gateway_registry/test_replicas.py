"""Two gateway replicas sharing one registry database (SQLite file, or PostgreSQL): a fresh database
converges on the served pool, and a change through one replica, or through the CLI with no server
involved, reaches both within a few seconds (polling of `pool_version`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness.fakehub import FakeHub
from bench.harness.tiny_pool import DRAFTER_IDS
from gateway.cli import main as hedgespec
from tests.gateway_registry.conftest import HUB_REPO, Admin, chat, start_server, wait_for

pytestmark = pytest.mark.timeout(600)
# A correctness bound, generous for a starved CI machine: changes arrive by polling, without a
# restart. The timing claim ("within a few seconds") is measured side by side in
# `python -m bench.reliability.reliability_bench` (bench/results/reliability.md, "Replica
# convergence").
CONVERGE_S = 20.0


@pytest.fixture(scope="module")
def replicas(pool_file: Path, hub: FakeHub, database_url: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Admin, Admin]]:
    """Both started at once on an empty database, as a deployment rolls out."""
    root = tmp_path_factory.mktemp("replicas")
    servers = [start_server(pool_file, root / name, database_url=database_url, hub=hub,
                            wait=False) for name in ("a", "b")]
    try:
        for server in servers:
            server._wait_ready(120)
        yield Admin(servers[0]), Admin(servers[1])
    finally:
        for server in servers:
            server.stop()


def converged(admins: tuple[Admin, ...], drafter_id: str, present: bool) -> float:
    """Seconds until every replica serves (or stops serving) `drafter_id`."""
    started = time.monotonic()
    for admin in admins:
        admin.wait_serving(drafter_id, present=present, timeout_s=30)
    return time.monotonic() - started


def test_a_fresh_database_converges_on_the_served_pool(replicas: tuple[Admin, Admin]) -> None:
    a, b = replicas
    for admin in replicas:
        rows = admin.drafters()
        assert {i: rows[i]["status"] for i in DRAFTER_IDS} == dict.fromkeys(DRAFTER_IDS, "ready")
        wait_for(lambda adm=admin: adm.http.get("/pool").json()["in_sync"], 60,
                 lambda: "replica never in sync")
        assert set(DRAFTER_IDS) <= admin.serving()
    # Imported once, although both replicas started on the same empty database.
    creates = [e for e in a.http.get("/events", params={"limit": 1000}).json()["data"]
               if e["action"] == "drafter.create"]
    assert sorted(e["target"] for e in creates) == sorted(DRAFTER_IDS)
    assert a.http.get("/pool").json()["replica"] != b.http.get("/pool").json()["replica"]


def test_an_add_through_one_replica_reaches_the_other(replicas: tuple[Admin, Admin]) -> None:
    a, b = replicas
    a.add(id="shared", name="Shared", source="hf", repo_id=HUB_REPO, revision="main",
          subfolder="gamma")
    row = a.wait_status("shared", "ready", "failed")
    assert row["status"] == "ready", row["error"]
    changed = time.monotonic()
    b.wait_serving("shared", timeout_s=30)
    assert time.monotonic() - changed < CONVERGE_S
    assert b.drafters()["shared"]["serving"] is True
    response = chat(b.server, "fixed:shared")
    assert response.status_code == 200, response.text
    assert set(response.json()["metrics"]["speculative_decoding"]["drafter_choices"]) == {"shared"}


def test_disable_and_enable_through_one_replica_reach_the_other(
    replicas: tuple[Admin, Admin],
) -> None:
    a, b = replicas
    assert b.http.patch("/drafters/alpha", json={"enabled": False}).status_code == 200
    assert converged(replicas, "alpha", present=False) < CONVERGE_S
    assert chat(a.server, "fixed:alpha").status_code == 400
    assert b.http.patch("/drafters/alpha", json={"enabled": True}).status_code == 200
    assert converged(replicas, "alpha", present=True) < CONVERGE_S
    assert chat(a.server, "fixed:alpha").status_code == 200


def test_cli_changes_reach_running_replicas(replicas: tuple[Admin, Admin], pool_file: Path,
                                            database_url: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = pool_file.parent / "drafters" / DRAFTER_IDS[1]
    assert hedgespec(["drafter", "add", "--database-url", database_url, "--path", str(path),
                      "--id", "from-cli", "--name", "From the CLI", "--domain", "test"]) == 0
    added = time.monotonic()
    row = replicas[0].wait_status("from-cli", "ready", "failed", timeout_s=30)
    assert row["status"] == "ready", row["error"]
    converged(replicas, "from-cli", present=True)
    assert time.monotonic() - added < CONVERGE_S + 2  # + validation of the new drafter
    assert chat(replicas[1].server, "fixed:from-cli").status_code == 200

    assert hedgespec(["drafter", "remove", "--database-url", database_url, "from-cli"]) == 0
    assert converged(replicas, "from-cli", present=False) < CONVERGE_S
    assert chat(replicas[0].server, "fixed:from-cli").status_code == 400
    capsys.readouterr()
