"""The `responses` table (Responses API state): an existing 0001 database upgrades to it, and
stored responses are private to their owner, replaced on re-save and purged by age, on SQLite
and (with HEDGESPEC_TEST_POSTGRES_URL) PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from alembic import command
from sqlalchemy import inspect
from sqlalchemy.orm import Session

from drafter_registry.db import alembic_config, current_revision, make_engine, upgrade
from drafter_registry.models import utcnow
from drafter_registry.responses import (
    delete_response,
    get_response,
    list_response_ids,
    purge_responses_older_than,
    save_response,
)


def _save(session: Session, response_id: str, owner: str = "key-a", **extra: object) -> None:
    save_response(session, response_id=response_id, owner=owner, status="completed",
                  model="m", body={"id": response_id, "output": []},
                  input_items=[{"id": "msg_1", "type": "message"}],
                  history=[{"role": "user", "content": "hi"}], **extra)  # type: ignore[arg-type]


def test_an_existing_0001_database_upgrades_and_downgrades(database_url: str) -> None:
    command.upgrade(alembic_config(database_url), "0001_initial")
    engine = make_engine(database_url)
    try:
        assert current_revision(engine) == "0001_initial"
        assert "responses" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
    upgrade(database_url, revision="0002_responses")
    engine = make_engine(database_url)
    try:
        assert current_revision(engine) == "0002_responses"
        assert "responses" in inspect(engine).get_table_names()
    finally:
        engine.dispose()
    command.downgrade(alembic_config(database_url), "0001_initial")
    engine = make_engine(database_url)
    try:
        assert "responses" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_responses_are_private_to_their_owner(session: Session) -> None:
    _save(session, "resp_1", previous_response_id=None, learner_session="resp_1")
    row = get_response(session, response_id="resp_1", owner="key-a")
    assert row is not None and row.history == [{"role": "user", "content": "hi"}]
    assert row.session == "resp_1" and row.created_at.tzinfo is not None
    assert get_response(session, response_id="resp_1", owner="key-b") is None
    assert not delete_response(session, response_id="resp_1", owner="key-b")
    assert delete_response(session, response_id="resp_1", owner="key-a")
    assert get_response(session, response_id="resp_1", owner="key-a") is None


def test_saving_again_replaces_and_old_rows_are_purged(session: Session) -> None:
    _save(session, "resp_old", created_at=utcnow() - timedelta(days=40))
    _save(session, "resp_new")
    save_response(session, response_id="resp_new", owner="key-a", status="failed", model="m",
                  body={"id": "resp_new"}, input_items=[], history=[])
    row = get_response(session, response_id="resp_new", owner="key-a")
    assert row is not None and row.status == "failed"
    assert purge_responses_older_than(session, cutoff=utcnow() - timedelta(days=30)) == 1
    assert list_response_ids(session, owner="key-a") == ["resp_new"]
