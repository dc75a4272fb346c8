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
from sqlalchemy import inspect

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
        assert current_revision(engine) == "0002_responses"
        assert set(inspect(engine).get_table_names()) >= {
            "drafters", "audit_events", "registry_state", "request_logs", "responses",
            "alembic_version"}
        with make_session_factory(engine)() as session:
            assert pool_version(session) == 0  # the counter row is created by the migration
    finally:
        engine.dispose()


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
