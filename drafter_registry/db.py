"""Engines, sessions, migrations and the pool-version probe.

No engine exists at import time; the gateway builds one from its settings with `make_engine` and
runs `upgrade(url)` on start.

SQLite (the embedded default) is tuned for one process with several threads (engine worker,
request-log writer, downloads, HTTP handlers):

- WAL journal, so readers never block the writer and the writer never blocks readers;
- write transactions (`begin_write`, used by every `crud` mutation) start with
  `BEGIN IMMEDIATE`: they take the write lock up front and wait for it (busy timeout) instead of
  failing with `database is locked` when another thread committed between their read and their
  write; read-only transactions stay deferred, so a long-lived reading session blocks nobody;
- pysqlite's own implicit transaction handling is turned off so that DDL is transactional too.

PostgreSQL (`postgresql+psycopg://...`) uses a pre-pinged connection pool. Replicas that share it
converge by polling `pool_version` (see `drafter_registry.models`), which is a primary-key read.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import time
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, create_engine, event, select, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from drafter_registry.models import REGISTRY_STATE_ID, RegistryState

SQLITE_BUSY_TIMEOUT_S = 30.0
# Connection execution option marking a write transaction (honoured on SQLite only).
WRITE_TRANSACTION = "hedgespec_write_transaction"
# Relative to the working directory (the repository root for `make serve` and in Docker).
DEFAULT_DATABASE_URL = "sqlite:///var/hedgespec.db"


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """An engine for `url`; SQLite files get their parent directory created."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _make_sqlite_engine(parsed, echo=echo)
    return create_engine(parsed, pool_pre_ping=True, echo=echo)


def _make_sqlite_engine(url: URL, *, echo: bool) -> Engine:
    in_memory = url.database in (None, "", ":memory:")
    kwargs: dict[str, Any] = {
        "echo": echo,
        "connect_args": {"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_S},
    }
    if in_memory:
        # One shared connection, or every session would see its own empty database.
        kwargs["poolclass"] = StaticPool
    else:
        Path(str(url.database)).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves, see below
        cursor = dbapi_connection.cursor()
        if not in_memory:
            _enable_wal(cursor)
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        writer = connection.get_execution_options().get(WRITE_TRANSACTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writer else "BEGIN")

    return engine


def _enable_wal(cursor: Any, timeout_s: float = SQLITE_BUSY_TIMEOUT_S) -> None:
    """Switch the database to WAL, waiting for other processes' locks. The switch reads under a
    shared lock and then needs an exclusive one; while another process holds a write lock
    (a replica migrating the same new database at the same moment) SQLite answers `database is
    locked` at once instead of calling the busy handler, since waiting while holding the shared
    lock could deadlock. Retrying from scratch releases the shared lock in between."""
    deadline, delay = time.monotonic() + timeout_s, 0.01
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.5)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded attributes after commit, so rows can be returned to callers."""
    return sessionmaker(bind=engine, expire_on_commit=False)


def begin_write(session: Session) -> None:
    """Start a write transaction on `session` (ending a read-only one it may have open).

    Call it before the first statement of a transaction that will write; on SQLite it takes the
    write lock at once (see the module docstring), elsewhere it is a plain begin.
    """
    if session.in_transaction():
        session.commit()
    session.connection(execution_options={WRITE_TRANSACTION: True})


def migrations_dir() -> Path:
    """The Alembic script directory, found through the installed `migrations` package."""
    spec = importlib.util.find_spec("migrations")
    if spec is not None and spec.origin is not None:
        candidate = Path(spec.origin).parent
        if (candidate / "env.py").is_file():
            return candidate
    return Path(__file__).resolve().parents[1] / "migrations"


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config independent of the working directory and of `alembic.ini`."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if url is not None:
        # Passed as an attribute, not a main option: ConfigParser would interpolate '%' in URLs.
        config.attributes["database_url"] = url
    return config


def upgrade(url: str, *, revision: str = "head") -> None:
    """Apply migrations up to `revision`; safe to call on every start and from every replica."""
    command.upgrade(alembic_config(url), revision)


def current_revision(engine: Engine) -> str | None:
    """The Alembic revision the database is at, `None` before the first migration."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def ping(engine: Engine) -> bool:
    """Whether the database answers; never raises (for health checks)."""
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        return True
    except Exception:
        return False


def pool_version(session: Session) -> int:
    """The registry's change counter; it moves whenever the serving pool may have changed."""
    version = session.scalar(
        select(RegistryState.pool_version).where(RegistryState.id == REGISTRY_STATE_ID)
    )
    return int(version or 0)
