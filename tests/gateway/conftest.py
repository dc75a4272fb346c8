"""Fixtures: a tiny local pool, and real `hedgespec serve` processes on loopback ports
(`bench.harness.server.ServerProcess`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from bench.harness.server import ServerProcess
from bench.harness.tiny_pool import MODEL_NAME, build_pool
from tests.conftest import SUITE_ENV

API_KEY = "sk-test-key"
SECOND_KEY = "sk-second-key"
ADMIN_KEY = "admin-secret"


@pytest.fixture(autouse=True)
def isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No developer `.env` or HEDGESPEC_* variable may leak into in-process Settings()."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("HEDGESPEC_") and name not in SUITE_ENV:
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def pool_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_pool(tmp_path_factory.mktemp("pool"))


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


# Clients of the shared server, for the modules that talk to it (a module may define its own).
@pytest.fixture(scope="module")
def client(server: ServerProcess) -> OpenAI:
    """The official SDK with the server's first API key."""
    return OpenAI(base_url=f"{server.base_url}/v1", api_key=API_KEY, max_retries=0)


@pytest.fixture(scope="module")
def other(server: ServerProcess) -> OpenAI:
    """The official SDK with the server's second API key."""
    return OpenAI(base_url=f"{server.base_url}/v1", api_key=SECOND_KEY, max_retries=0)


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    """Plain HTTP with the first API key (exact frames, raw status codes)."""
    with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {API_KEY}"},
                      timeout=60) as c:  # fmt: skip
        yield c
