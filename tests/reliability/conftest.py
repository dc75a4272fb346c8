"""Fixtures of the reliability and security suites (issue 9): real `hedgespec serve` processes
on loopback ports with the tiny local pool, and the `--soak` switch.

Every load, storm and fuzz loop here is bounded in count and time. The default run is sized for
CI (a few minutes on two shared cores); `--soak` (or `HEDGESPEC_SOAK=1`) enables the long runs
marked `soak` and scales the fuzz budget up.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.conftest import ServerProcess
from tests.gateway.tiny_pool import build_pool

SOAK_ENV = "HEDGESPEC_SOAK"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak", action="store_true", default=False,
        help="run the long reliability soak tests (marked `soak`); also HEDGESPEC_SOAK=1",
    )  # fmt: skip


def soak_enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("--soak", default=False)) or os.environ.get(SOAK_ENV) == "1"


def pytest_configure(config: pytest.Config) -> None:
    if soak_enabled(config):
        os.environ[SOAK_ENV] = "1"  # module-level sizes (test_fuzz.py) read it at import


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if soak_enabled(config):
        return
    skip = pytest.mark.skip(reason="soak run: pass --soak (or set HEDGESPEC_SOAK=1)")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def soak(pytestconfig: pytest.Config) -> bool:
    return soak_enabled(pytestconfig)


@pytest.fixture(scope="session")
def pool_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_pool(tmp_path_factory.mktemp("pool"))


def start_server(
    pool: Path, workdir: Path, *flags: str, env: dict[str, str] | None = None,
    timeout_s: float = 90,
) -> ServerProcess:
    """`ServerProcess.start` with settings that have no CLI flag written to the server's `.env`
    (it runs in `workdir`, and `ServerProcess` strips inherited HEDGESPEC_* variables)."""
    workdir.mkdir(parents=True, exist_ok=True)
    if env:
        (workdir / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return ServerProcess.start(pool, workdir, *flags, timeout_s=timeout_s)


@pytest.fixture(scope="module")
def server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    """Servers started by a module, all stopped at its end."""
    started: list[ServerProcess] = []
    yield started
    for proc in started:
        proc.stop()
