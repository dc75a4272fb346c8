"""Shared readers for the deployment files: they are checked statically here (no Docker engine
runs in CI), and the image's entry point is run outside Docker in test_entrypoint.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
ENV_EXAMPLE = REPO_ROOT / ".env.example"
ENTRYPOINT = REPO_ROOT / "deploy" / "entrypoint.sh"
HEALTHCHECK = REPO_ROOT / "deploy" / "healthcheck.py"
NGINX_CONF = REPO_ROOT / "deploy" / "nginx.conf"
K8S_DIR = REPO_ROOT / "deploy" / "k8s"
DEPLOY_DOC = REPO_ROOT / "docs" / "deploy.md"

# Settings the deployment files name that gateway/config.py does not define yet. Each is only
# ever used commented out or documented as upcoming; see docs/deploy.md.
PENDING_SETTINGS: set[str] = set()  # every documented setting exists now (device_map landed)
# Variables read by deploy/entrypoint.sh itself, not by the gateway.
ENTRYPOINT_VARIABLES = {"HEDGESPEC_MIGRATE_ATTEMPTS", "HEDGESPEC_MIGRATE_DELAY_S"}

_ASSIGNMENT = re.compile(r"^\s*(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$")


def settings_variables() -> set[str]:
    """Every HEDGESPEC_* variable the gateway's Settings class reads."""
    from gateway.config import Settings

    prefix = Settings.model_config.get("env_prefix", "")
    return {f"{prefix}{name}".upper() for name in Settings.model_fields}


def parse_env_file(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(active, commented) `NAME=value` assignments of a dotenv file, in file order."""
    active: dict[str, str] = {}
    commented: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = _ASSIGNMENT.match(line)
        if match:
            target = commented if match.group(1) else active
            target[match.group(2)] = match.group(3).strip()
    return active, commented


def commented_block(path: Path, heading: str) -> dict[str, str]:
    """The commented assignments that follow the `# --- <heading>` line, up to the next heading."""
    values: dict[str, str] = {}
    inside = False
    for line in path.read_text().splitlines():
        if line.startswith("# ---"):
            inside = heading.lower() in line.lower()
            continue
        match = _ASSIGNMENT.match(line)
        if inside and match and match.group(1):
            values[match.group(2)] = match.group(3).strip()
    return values


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="session")
def k8s_objects() -> list[dict[str, Any]]:
    objects = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                doc["__file__"] = path.name
                objects.append(doc)
    return objects


# ---- the entry point as a process ---------------------------------------------------------------

_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
START_TIMEOUT_S = 120.0


@pytest.fixture(scope="session")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped demo pool when built (`hedgespec demo build`), else the gateway tests' tiny
    random pool, so the entry point runs on a fresh checkout in seconds."""
    from demo.domains import DEMO_POOL

    if DEMO_POOL.is_file():
        return DEMO_POOL
    from bench.harness.tiny_pool import build_pool

    return build_pool(tmp_path_factory.mktemp("pool"))


def clean_env(**extra: str) -> dict[str, str]:
    """A clean environment: the venv's tools first on PATH (as /opt/venv/bin is in the image),
    no HEDGESPEC_* or HF_* from the developer's shell, one BLAS thread on the shared CI machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HEDGESPEC_", "HF_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env.update(HEDGESPEC_DEVICE="cpu", HEDGESPEC_DTYPE="float32")
    env.update(extra)
    return env


API_KEY = "test-api-key"
ADMIN_KEY = "test-admin-key"


class Server:
    """`deploy/entrypoint.sh` running `hedgespec serve` on a free loopback port."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc, self.log_path, self.port = proc, log, 0

    @classmethod
    @contextmanager
    def start(cls, pool: Path, workdir: Path, *, database_url: str) -> Iterator[Server]:
        env = clean_env(
            HEDGESPEC_DATABASE_URL=database_url,
            HEDGESPEC_POOL=str(pool),
            HEDGESPEC_HOST="127.0.0.1",  # the image's default is 0.0.0.0; not on a CI machine
            HEDGESPEC_ADMIN_KEY=ADMIN_KEY,
            HEDGESPEC_API_KEYS=API_KEY,
        )
        log = workdir / "entrypoint.log"
        with log.open("wb") as out:
            # Flags after the entry point reach `hedgespec serve`: port 0 picks a free port.
            proc = subprocess.Popen(
                ["bash", str(ENTRYPOINT), "--port", "0", "--no-warmup"],
                env=env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        server = cls(proc, log)
        try:
            server.wait_listening()
            yield server
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

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
        """Exit status of deploy/healthcheck.py against this server, as Docker would run it."""
        return subprocess.run(
            [sys.executable, str(HEALTHCHECK), path],
            env={**os.environ, "HEDGESPEC_PORT": str(self.port)}, capture_output=True,
        ).returncode  # fmt: skip

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.probe("/ready") != 0:
            assert time.monotonic() < deadline, f"/ready never answered 200:\n{self.log()}"
            assert self.proc.poll() is None, self.log()
            time.sleep(0.5)
