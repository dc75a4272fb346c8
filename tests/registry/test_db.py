"""Engine factories: SQLite tuning, health ping, pool version."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from sqlalchemy import text

from drafter_registry import crud
from drafter_registry.db import make_engine, make_session_factory, ping, pool_version, upgrade
from drafter_registry.models import Base


def test_sqlite_files_get_a_directory_and_wal(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'a' / 'b' / 'registry.db'}")
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert (tmp_path / "a" / "b").is_dir() and ping(engine)
    finally:
        engine.dispose()


def test_wal_switch_waits_for_another_process_s_write_lock(tmp_path: Path) -> None:
    """Two replicas creating one database at once: one holds a write lock (migrating) while the
    other connects and switches to WAL. SQLite refuses that switch at once, without its busy
    handler (deadlock avoidance); the connection must wait for the lock instead of failing."""
    path = tmp_path / "r.db"
    sqlite3.connect(path).execute("CREATE TABLE x (i)").connection.commit()
    held, release = threading.Event(), threading.Event()

    def writer() -> None:  # another process, as far as SQLite's locks are concerned
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO x VALUES (1)")
        held.set()
        release.wait(10)
        other.execute("COMMIT")
        other.close()

    thread = threading.Thread(target=writer)
    thread.start()
    held.wait(10)
    threading.Timer(0.5, release.set).start()
    engine = make_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("SELECT count(*) FROM x")).scalar() == 1  # after the commit
    thread.join(10)
    engine.dispose()


def test_in_memory_sqlite_is_one_shared_database() -> None:
    engine = make_engine("sqlite://")
    Base.metadata.create_all(engine)
    factory = make_session_factory(engine)
    with factory() as s:
        assert pool_version(s) == 0  # no counter row yet (create_all, not the migration)
        crud.create_drafter(s, name="x", source="local", path="/x", actor="cli")
    with factory() as s:
        assert [d.id for d in crud.list_drafters(s)] == ["x"] and pool_version(s) == 1


def test_ping_never_raises() -> None:
    engine = make_engine("postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert ping(engine) is False


def test_pool_version_is_shared_by_engines_on_one_database(database_url: str) -> None:
    upgrade(database_url)
    replica_a, replica_b = make_engine(database_url), make_engine(database_url)
    try:
        a, b = make_session_factory(replica_a), make_session_factory(replica_b)
        with b() as s:
            seen = pool_version(s)
        with a() as s:
            crud.create_drafter(s, name="x", source="local", path="/x", actor="admin")
        with b() as s:
            assert pool_version(s) == seen + 1
    finally:
        replica_a.dispose()
        replica_b.dispose()
