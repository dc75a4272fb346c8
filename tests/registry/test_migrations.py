"""Migrations: upgrade from empty on each backend, match the models, run from anywhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from drafter_registry import crud
from drafter_registry.db import (
    alembic_config,
    current_revision,
    make_engine,
    make_session_factory,
    pool_version,
    upgrade,
)
from drafter_registry.models import Base

REPO_ROOT = Path(__file__).resolve().parents[2]


def schema_diff(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def test_upgrade_from_empty_matches_the_models(database_url: str) -> None:
    upgrade(database_url)
    assert schema_diff(database_url) == []
    engine = make_engine(database_url)
    try:
        assert current_revision(engine) == "0003_drafter_kinds"
        assert set(inspect(engine).get_table_names()) >= {
            "drafters", "audit_events", "registry_state", "request_logs", "responses",
            "alembic_version"}
        with make_session_factory(engine)() as session:
            assert pool_version(session) == 0  # the counter row is created by the migration
    finally:
        engine.dispose()


def test_upgrade_from_0002_keeps_rows_as_eagle3_and_takes_model_free_drafters(
    database_url: str,
) -> None:
    """A database at 0002 with drafters in it (written with 0002's columns only) upgrades: every
    row becomes an eagle3 drafter, unchanged otherwise; model-free rows then fit the schema
    (source `none` passes the rewritten check) and `ftp` still does not; downgrade drops them."""
    upgrade(database_url, revision="0002_responses")
    engine = make_engine(database_url)
    at = "2026-01-01 00:00:00+00:00"
    rows = [  # one Hub drafter mid-download, one local drafter ready
        {"id": "hub", "name": "Hub", "source": "hf", "repo_id": "org/r", "revision": "main",
         "path": None, "status": "downloading", "done": 5, "ready_at": None},
        {"id": "disk", "name": "Disk", "source": "local", "repo_id": None, "revision": None,
         "path": "/d", "status": "ready", "done": 0, "ready_at": at},
    ]  # fmt: skip
    try:
        with engine.begin() as connection:
            for row in rows:
                connection.execute(text(
                    "INSERT INTO drafters (id, name, source, repo_id, revision, local_path, tags,"
                    " status, bytes_done, created_at, updated_at, ready_at) VALUES (:id, :name,"
                    " :source, :repo_id, :revision, :path, '[]', :status, :done, :at, :at,"
                    " :ready_at)"), {**row, "at": at})
    finally:
        engine.dispose()
    upgrade(database_url)
    assert schema_diff(database_url) == []
    engine = make_engine(database_url)
    try:
        assert current_revision(engine) == "0003_drafter_kinds"
        with make_session_factory(engine)() as session:
            got = {d.id: d for d in crud.list_drafters(session)}
            assert {i: (d.kind, d.params, d.source, d.status, d.bytes_done, d.model_free)
                    for i, d in got.items()} == {
                "hub": ("eagle3", None, "hf", "downloading", 5, False),
                "disk": ("eagle3", None, "local", "ready", 0, False)}
            assert got["hub"].repo_id == "org/r" and got["disk"].local_path == "/d"
            crud.create_drafter(session, drafter_id="lookup", name="Lookup", kind="ngram",
                                params={"max_n": 4}, actor="test")
        with engine.connect() as connection:
            stored = connection.execute(
                text("SELECT kind, source, status FROM drafters WHERE id = 'lookup'")).one()
            assert tuple(stored) == ("ngram", "none", "ready")
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(text("UPDATE drafters SET source = 'ftp' WHERE id = 'disk'"))
    finally:
        engine.dispose()
    from alembic import command

    command.downgrade(alembic_config(database_url), "0002_responses")
    engine = make_engine(database_url)
    try:
        columns = {c["name"] for c in inspect(engine).get_columns("drafters")}
        assert "kind" not in columns and "params" not in columns
        with engine.connect() as connection:
            ids = connection.execute(text("SELECT id FROM drafters ORDER BY id")).scalars().all()
        assert ids == ["disk", "hub"]  # the model-free row cannot exist at 0002
    finally:
        engine.dispose()
    upgrade(database_url)
    assert schema_diff(database_url) == []


def test_upgrade_twice_is_a_no_op_and_downgrade_round_trips(database_url: str) -> None:
    upgrade(database_url)
    upgrade(database_url)
    from alembic import command

    command.downgrade(alembic_config(database_url), "base")
    engine = make_engine(database_url)
    try:
        assert current_revision(engine) is None
        assert "drafters" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
    upgrade(database_url)
    assert schema_diff(database_url) == []


def test_upgrade_does_not_depend_on_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'nested' / 'dir' / 'registry.db'}"
    upgrade(url)  # also creates the parent directories
    assert (tmp_path / "nested" / "dir" / "registry.db").is_file()
    assert schema_diff(url) == []


def test_alembic_cli_takes_the_url_from_the_environment(tmp_path: Path) -> None:
    db_file = tmp_path / "cli.db"
    env = {**os.environ, "HEDGESPEC_DATABASE_URL": f"sqlite:///{db_file}"}
    run = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", "alembic.ini", "upgrade", "head"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert schema_diff(f"sqlite:///{db_file}") == []


def test_revision_ids_are_readable_and_linear() -> None:
    scripts = ScriptDirectory.from_config(alembic_config())
    revisions = list(scripts.walk_revisions())
    assert scripts.get_heads() == [revisions[0].revision]
    for script in revisions:
        assert re.fullmatch(r"\d{4}_[a-z0-9_]+", script.revision)
        assert Path(str(script.path)).name == f"{script.revision}.py"
