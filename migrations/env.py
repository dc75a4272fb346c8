"""Alembic environment for the drafter registry.

The database URL is, in order: `config.attributes["database_url"]` (set by
`drafter_registry.db.upgrade`), `-x db_url=...`, the `HEDGESPEC_DATABASE_URL` environment variable
(the Docker entry point), `sqlalchemy.url` in the ini file, then the embedded SQLite default.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection, text

from drafter_registry.db import DEFAULT_DATABASE_URL, WRITE_TRANSACTION, make_engine
from drafter_registry.models import Base

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata

# Any constant works; replicas of one deployment only need to agree on it.
MIGRATION_LOCK_KEY = 0x48656467655370  # b"HedgeSp"


def database_url() -> str:
    return (
        config.attributes.get("database_url")
        or context.get_x_argument(as_dictionary=True).get("db_url")
        or os.environ.get("HEDGESPEC_DATABASE_URL")
        or config.get_main_option("sqlalchemy.url")
        or DEFAULT_DATABASE_URL
    )


def run_migrations_offline() -> None:
    """Emit SQL to stdout (`alembic upgrade head --sql`)."""
    url = database_url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _configure(connection: Connection) -> None:
    is_sqlite = connection.dialect.name == "sqlite"
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things in place; batch mode copies the table instead.
        render_as_batch=is_sqlite,
        # drafter_registry.db makes SQLite DDL transactional (it emits BEGIN itself).
        transactional_ddl=True,
        compare_type=True,
    )


def run_migrations_online() -> None:
    engine = make_engine(database_url())
    try:
        with engine.connect() as connection:
            # On SQLite: BEGIN IMMEDIATE, so two processes migrating at once queue up cleanly.
            connection.execution_options(**{WRITE_TRANSACTION: True})
            _configure(connection)
            with context.begin_transaction():
                if connection.dialect.name == "postgresql":
                    # Replicas starting together migrate one at a time; the others then see head.
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
                    )
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
