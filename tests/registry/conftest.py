"""Fixtures of the registry tests: a migrated database on SQLite and, when
`HEDGESPEC_TEST_POSTGRES_URL` is set (CI starts a server with .ci/postgres.sh), on PostgreSQL, one
fresh database per test; and a fake Hugging Face hub on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from bench.harness.fakehub import FakeHub
from bench.harness.postgres import POSTGRES_ENV, fresh_postgres_database, url_string
from drafter_registry.db import make_engine, make_session_factory, upgrade

BACKENDS = [
    "sqlite",
    pytest.param("postgresql", marks=[
        pytest.mark.postgres,
        pytest.mark.skipif(not os.environ.get(POSTGRES_ENV), reason=f"{POSTGRES_ENV} is not set"),
    ]),
]


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database (not migrated) on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.db'}"
        return
    with fresh_postgres_database(os.environ[POSTGRES_ENV]) as url:
        yield url_string(url)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """A database migrated to head, as the gateway does on start."""
    upgrade(database_url)
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def session_factory(engine: Engine) -> sessionmaker[Session]:
    return make_session_factory(engine)


@pytest.fixture
def session(session_factory: sessionmaker[Session]) -> Iterator[Session]:
    with session_factory() as session:
        yield session


@pytest.fixture
def fake_hub() -> Iterator[FakeHub]:
    with FakeHub() as hub:
        yield hub


@pytest.fixture
def hub_cache(tmp_path: Path) -> Path:
    return tmp_path / "hf-cache"
