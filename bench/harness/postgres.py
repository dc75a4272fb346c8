"""Throw-away PostgreSQL databases for tests and the reliability bench: each caller gets a new,
empty database on the server of `HEDGESPEC_TEST_POSTGRES_URL` (CI: `.ci/postgres.sh`), dropped
afterwards even while connections to it are still open."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

from sqlalchemy import URL, create_engine, text
from sqlalchemy.engine import make_url

POSTGRES_ENV = "HEDGESPEC_TEST_POSTGRES_URL"


@contextlib.contextmanager
def fresh_postgres_database(admin_url: str, prefix: str = "hedgespec_test") -> Iterator[URL]:
    """A new database on the server of `admin_url`, as a URL; dropped on exit."""
    url = make_url(admin_url)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        yield url.set(database=name)
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def url_string(url: URL) -> str:
    """The URL with its password, as a server's `--database-url` needs it."""
    return url.render_as_string(hide_password=False)
