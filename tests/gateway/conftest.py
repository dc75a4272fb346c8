"""Fixtures: a tiny local pool, and real `hedgespec serve` processes on loopback ports."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.gateway.tiny_pool import MODEL_NAME, build_pool

REPO_ROOT = Path(__file__).resolve().parents[2]
API_KEY = "sk-test-key"
SECOND_KEY = "sk-second-key"
ADMIN_KEY = "admin-secret"
_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


@pytest.fixture(autouse=True)
def isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No developer `.env` or HEDGESPEC_* variable may leak into in-process Settings()."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("HEDGESPEC_") and name != "HEDGESPEC_DTYPE":  # fp32: tests/conftest.py
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def pool_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_pool(tmp_path_factory.mktemp("pool"))


@dataclass
class ServerProcess:
    """A `python -m gateway serve` child process; its log goes to a file, never a pipe."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    base_url: str = ""

    @classmethod
    def start(cls, pool: Path, workdir: Path, *extra: str, timeout_s: float = 90) -> ServerProcess:
        workdir.mkdir(parents=True, exist_ok=True)
        log_path = workdir / "server.log"
        args = [
            sys.executable, "-m", "gateway", "serve",
            "--pool", str(pool),
            "--port", "0",
            "--database-url", f"sqlite:///{workdir / 'registry.db'}",
            *extra,
        ]  # fmt: skip
        # One BLAS thread: the test machine is shared, and oversubscribed threads make every
        # round 100x slower.
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        # Importable from the temporary working directory even without an editable install.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        env = {k: v for k, v in env.items() if not k.startswith("HEDGESPEC_") or k == "HEDGESPEC_DTYPE"}
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env
            )
        server = cls(proc, log_path)
        server._wait_ready(timeout_s)
        return server

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            match = _LISTENING.search(self.log())
            if match and not self.base_url:
                self.base_url = f"http://127.0.0.1:{match.group(1)}"
            if self.base_url:
                try:
                    if httpx.get(f"{self.base_url}/ready", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"server not ready after {timeout_s} s:\n{self.log()}")

    def stop(self, timeout_s: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server(pool_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The shared server: two client keys, an admin key, the default limits."""
    proc = ServerProcess.start(
        pool_file,
        tmp_path_factory.mktemp("server"),
        "--api-key", API_KEY, "--api-key", SECOND_KEY, "--admin-key", ADMIN_KEY,
    )  # fmt: skip
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def model_name() -> str:
    return MODEL_NAME
