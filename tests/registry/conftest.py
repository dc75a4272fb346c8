"""Fixtures of the registry tests: a migrated database on SQLite and, when
`HEDGESPEC_TEST_POSTGRES_URL` is set (CI starts a server with .ci/postgres.sh), on PostgreSQL, one
fresh database per test; and a fake Hugging Face hub on loopback."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from drafter_registry.db import make_engine, make_session_factory, upgrade
from tests.fakehub import FakeHub

POSTGRES_ENV = "HEDGESPEC_TEST_POSTGRES_URL"
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
    admin_url = make_url(os.environ[POSTGRES_ENV])
    name = f"hedgespec_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        yield admin_url.set(database=name).render_as_string(hide_password=False)
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


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
