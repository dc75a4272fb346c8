"""Fixtures of the reliability and security suites (issue 9): the tiny local pool and the
`--soak` switch. Servers are real `hedgespec serve` processes on loopback ports, started with
`bench.reliability.scenarios.start_server` (`bench.harness.server.ServerProcess` plus a `.env` for
settings without a CLI flag, and an offline Hugging Face endpoint).

Every load, storm and fuzz loop here is bounded in count and time. The default run is sized for
CI (a few minutes on two shared cores); `--soak` (or `HEDGESPEC_SOAK=1`) enables the long runs
marked `soak` and scales the fuzz budget up. (The option itself is registered in
tests/conftest.py, so that `pytest --soak` works from the repository root.)
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.harness.tiny_pool import build_pool

SOAK_ENV = "HEDGESPEC_SOAK"


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
