"""CRUD on SQLite and PostgreSQL: audit rows, pool-version bumps, compare-and-set statuses."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session, sessionmaker

from drafter_registry import crud
from drafter_registry.db import pool_version
from drafter_registry.errors import (
    DrafterConflict,
    DrafterNotFound,
    InvalidDrafter,
    InvalidIdentifier,
    StatusConflict,
)
from drafter_registry.models import Drafter


def add_hf(session: Session, name: str = "Python drafter", **kw: object) -> Drafter:
    fields: dict[str, object] = {"repo_id": "org/drafters", "subfolder": "python", **kw}
    return crud.create_drafter(session, name=name, source="hf", actor="admin", **fields)  # type: ignore[arg-type]


def actions(session: Session, target: str) -> list[str]:
    return [e.action for e in reversed(crud.list_events(session, target=target))]


def test_create_writes_the_row_an_audit_event_and_bumps_the_pool_version(session: Session) -> None:
    before = pool_version(session)
    drafter = add_hf(session, domain="Python", tags=["code", "python", "code"])
    session.expire_all()
    row = crud.get_drafter(session, drafter_id="python-drafter")
    assert row is not None and row.id == drafter.id
    assert (row.status, row.revision, row.subfolder, row.domain, row.tags) == (
        "pending", "main", "python", "python", ["code", "python"])
    assert (row.created_at.tzinfo is not None
            and row.updated_at - row.created_at < timedelta(seconds=1))
    [event] = crud.list_events(session, target=row.id)
    assert event.detail is not None
    assert (event.actor, event.action, event.detail["repo_id"]) == ("admin", "drafter.create",
                                                                    "org/drafters")
    assert pool_version(session) == before + 1


def test_ids_derive_from_names_and_stay_unique(session: Session) -> None:
    assert add_hf(session, name="Math").id == "math"
    assert add_hf(session, name="MATH!").id == "math-2"
    with pytest.raises(DrafterConflict):
        add_hf(session, name="Math")  # names are unique too
    with pytest.raises(DrafterConflict):
        add_hf(session, name="Other", drafter_id="math")


@pytest.mark.parametrize(("fields", "error"), [
    ({"source": "hf"}, InvalidDrafter),
    ({"source": "hf", "repo_id": "a/b", "path": "/x"}, InvalidDrafter),
    ({"source": "local", "path": "/x", "subfolder": "s"}, InvalidDrafter),
    ({"source": "s3", "path": "/x"}, InvalidDrafter),
    ({"source": "hf", "repo_id": "a/b", "subfolder": "../../etc"}, InvalidIdentifier),
    ({"source": "hf", "repo_id": "a/b", "revision": "../main"}, InvalidIdentifier),
    ({"source": "hf", "repo_id": "a/b", "drafter_id": "Bad Id"}, InvalidIdentifier),
])
def test_invalid_specs_write_nothing(session: Session, fields: dict[str, str],
                                     error: type[Exception]) -> None:
    with pytest.raises(error):
        crud.create_drafter(session, name="x", actor="admin", **fields)  # type: ignore[arg-type]
    assert crud.list_drafters(session) == [] and crud.list_events(session) == []
    assert pool_version(session) == 0


def test_lifecycle_to_ready_records_every_step(session: Session) -> None:
    d = add_hf(session)
    crud.start_download(session, drafter_id=d.id, actor="system")
    assert crud.set_progress(session, drafter_id=d.id, bytes_done=50, bytes_total=100)
    version = pool_version(session)
    crud.finish_download(session, drafter_id=d.id, local_path="/cache/x", commit_sha="a" * 40,
                         actor="system")
    ready = crud.mark_ready(session, drafter_id=d.id, inspection={"compatible": True},
                            actor="system")
    assert (ready.status, ready.local_path, ready.commit_sha, ready.inspection) == (
        "ready", "/cache/x", "a" * 40, {"compatible": True})
    assert ready.ready_at is not None and ready.error is None
    assert pool_version(session) == version + 2
    assert actions(session, d.id) == ["drafter.create"] + ["drafter.status"] * 3
    events = reversed(crud.list_events(session, target=d.id))
    statuses = [(e.detail or {})["to"] for e in events if e.action == "drafter.status"]
    assert statuses == ["downloading", "validating", "ready"]


def test_progress_is_silent_and_only_lands_while_downloading(session: Session) -> None:
    d = add_hf(session)
    version, events = pool_version(session), len(crud.list_events(session))
    assert not crud.set_progress(session, drafter_id=d.id, bytes_done=1, bytes_total=2)  # pending
    crud.start_download(session, drafter_id=d.id, actor="system")
    version, events = pool_version(session), len(crud.list_events(session))
    for done in (10, 20, 30):
        assert crud.set_progress(session, drafter_id=d.id, bytes_done=done, bytes_total=30)
    session.expire_all()
    row = crud.get_drafter(session, drafter_id=d.id)
    assert row is not None and (row.bytes_done, row.bytes_total) == (30, 30)
    assert pool_version(session) == version and len(crud.list_events(session)) == events
    assert not crud.set_progress(session, drafter_id="missing", bytes_done=1, bytes_total=1)


def test_transitions_are_compare_and_set(session: Session) -> None:
    d = add_hf(session)
    with pytest.raises(StatusConflict, match="pending"):
        crud.mark_ready(session, drafter_id=d.id, inspection=None, actor="system")
    crud.set_enabled(session, drafter_id=d.id, enabled=False, actor="admin")
    with pytest.raises(StatusConflict):
        crud.start_download(session, drafter_id=d.id, actor="system")  # disabled meanwhile
    with pytest.raises(StatusConflict):
        crud.mark_failed(session, drafter_id=d.id, error="boom", actor="system")
    session.expire_all()
    row = crud.get_drafter(session, drafter_id=d.id)
    assert row is not None and (row.status, row.error) == ("disabled", None)
    with pytest.raises(InvalidDrafter):
        crud.set_status(session, drafter_id=d.id, status="exploded", actor="admin")


def test_failure_then_retry(session: Session) -> None:
    d = add_hf(session)
    crud.start_download(session, drafter_id=d.id, actor="system")
    crud.set_progress(session, drafter_id=d.id, bytes_done=5, bytes_total=10)
    failed = crud.mark_failed(session, drafter_id=d.id, error="revision not found", actor="system")
    assert (failed.status, failed.error) == ("failed", "revision not found")
    retried = crud.retry_drafter(session, drafter_id=d.id, actor="admin")
    assert ((retried.status, retried.error, retried.bytes_done, retried.bytes_total)
            == ("pending", None, 0, None))
    with pytest.raises(StatusConflict):
        crud.retry_drafter(session, drafter_id=d.id, actor="admin")


def test_enable_returns_to_ready_only_if_validated_before(session: Session) -> None:
    ready = add_hf(session, name="A")
    crud.start_download(session, drafter_id=ready.id, actor="system")
    crud.finish_download(session, drafter_id=ready.id, local_path="/p", commit_sha=None,
                         actor="system")
    crud.mark_ready(session, drafter_id=ready.id, inspection=None, actor="system")
    fresh = add_hf(session, name="B")
    for drafter_id, back_to in ((ready.id, "ready"), (fresh.id, "pending")):
        assert crud.set_enabled(session, drafter_id=drafter_id, enabled=False,
                                actor="admin").status == "disabled"
        version = pool_version(session)
        assert (crud.set_enabled(session, drafter_id=drafter_id, enabled=True, actor="admin").status
                == back_to)
        assert pool_version(session) == version + 1
    version = pool_version(session)
    crud.set_enabled(session, drafter_id=ready.id, enabled=True, actor="admin")  # already enabled
    assert pool_version(session) == version


def test_update_and_delete(session: Session) -> None:
    d = add_hf(session)
    updated = crud.update_drafter(session, drafter_id=d.id, actor="admin",
                                  changes={"name": "Py", "domain": "Code", "tags": ["x"]})
    assert (updated.name, updated.domain, updated.tags) == ("Py", "code", ["x"])
    with pytest.raises(InvalidDrafter):
        crud.update_drafter(session, drafter_id=d.id, actor="admin", changes={"repo_id": "a/b"})
    version = pool_version(session)
    crud.delete_drafter(session, drafter_id=d.id, actor="cli")
    assert crud.get_drafter(session, drafter_id=d.id) is None
    assert pool_version(session) == version + 1
    assert crud.list_events(session, target=d.id)[0].actor == "cli"
    with pytest.raises(DrafterNotFound):
        crud.delete_drafter(session, drafter_id=d.id, actor="cli")


def test_lists_filter_and_page(session: Session) -> None:
    a, b = add_hf(session, name="A"), add_hf(session, name="B")
    crud.start_download(session, drafter_id=b.id, actor="system")
    crud.record_event(session, actor="admin", action="pool.sync", detail={"n": 2})
    assert [d.id for d in crud.list_drafters(session)] == [a.id, b.id]
    assert [d.id for d in crud.list_drafters(session, statuses=["downloading"])] == [b.id]
    assert {d.id for d in crud.list_unfinished(session)} == {a.id, b.id}
    newest = crud.list_events(session, limit=2)
    assert [e.action for e in newest] == ["pool.sync", "drafter.status"]
    older = crud.list_events(session, limit=10, before_id=newest[-1].id)
    assert [e.action for e in older] == ["drafter.create", "drafter.create"]


def test_concurrent_mutations_each_bump_the_version_once(
    session_factory: sessionmaker[Session],
) -> None:
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for j in range(5):
                with session_factory() as s:
                    d = add_hf(s, name=f"w{k}-{j}")
                    crud.set_enabled(s, drafter_id=d.id, enabled=False, actor="admin")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with session_factory() as s:
        assert pool_version(s) == 4 * 5 * 2
        assert len(crud.list_events(s, limit=1000)) == 40


def test_an_open_reading_session_blocks_no_writer(session_factory: sessionmaker[Session]) -> None:
    with session_factory() as reader:
        add_hf(reader, name="A")
        assert [d.id for d in crud.list_drafters(reader)] == ["a"]  # leaves a read transaction open
        seen = pool_version(reader)
        with session_factory() as writer:
            started = time.monotonic()
            add_hf(writer, name="B")
            # blocked, it would wait out the 30 s busy timeout
            assert time.monotonic() - started < 10.0
        add_hf(reader, name="C")  # the reader's next write starts a fresh transaction
        assert pool_version(reader) == seen + 2


# ---- model-free drafters ------------------------------------------------------------------------


def test_a_model_free_drafter_is_ready_at_once_with_its_params(session: Session) -> None:
    version = pool_version(session)
    lookup = crud.create_drafter(session, drafter_id="lookup", name="Lookup", kind="ngram",
                                 params={"max_n": 4, "max_depth": 6, "min_n": 1}, actor="admin")
    session.expire_all()
    row = crud.get_drafter(session, drafter_id=lookup.id)
    assert row is not None and row.model_free
    assert (row.kind, row.params, row.source, row.status, row.local_path, row.repo_id) == (
        "ngram", {"max_n": 4, "max_depth": 6, "min_n": 1}, "none", "ready", None, None)
    assert row.ready_at is not None and pool_version(session) == version + 1
    [event] = crud.list_events(session, target="lookup")
    assert event.detail is not None and (event.detail["kind"], event.detail["params"]) == (
        "ngram", {"max_n": 4, "max_depth": 6, "min_n": 1})
    # Nothing to fetch: enabling and retrying return it to ready, never to pending.
    crud.set_enabled(session, drafter_id="lookup", enabled=False, actor="admin")
    assert crud.set_enabled(session, drafter_id="lookup", enabled=True,
                            actor="admin").status == "ready"
    crud.mark_failed(session, drafter_id="lookup", error="unknown kind here", actor="pool-sync",
                     expected={"ready"})
    retried = crud.retry_drafter(session, drafter_id="lookup", actor="admin")
    assert (retried.status, retried.error) == ("ready", None)
    # eagle3 rows stay as they were: kind eagle3, no params.
    hf = add_hf(session)
    assert (hf.kind, hf.params, hf.model_free, hf.status) == ("eagle3", None, False, "pending")


@pytest.mark.parametrize(("fields", "error"), [
    ({"kind": "ngram", "source": "hf", "repo_id": "a/b"}, InvalidDrafter),
    ({"kind": "ngram", "source": "local", "path": "/x"}, InvalidDrafter),
    ({"kind": "ngram", "repo_id": "a/b"}, InvalidDrafter),
    ({"kind": "ngram", "params": [1, 2]}, InvalidDrafter),
    ({"kind": "ngram", "params": {"max_n": [4]}}, InvalidDrafter),
    ({"kind": "ngram", "params": {"Bad Name": 4}}, InvalidIdentifier),
    ({"kind": "N-Gram"}, InvalidIdentifier),
    ({"kind": "eagle3", "source": "none"}, InvalidDrafter),
    ({"kind": "eagle3"}, InvalidDrafter),  # an eagle3 drafter needs a source
    ({"source": "hf", "repo_id": "a/b", "params": {"max_n": 4}}, InvalidDrafter),
])  # fmt: skip
def test_invalid_model_free_specs_write_nothing(session: Session, fields: dict[str, object],
                                                error: type[Exception]) -> None:
    with pytest.raises(error):
        crud.create_drafter(session, name="x", actor="admin", **fields)  # type: ignore[arg-type]
    assert crud.list_drafters(session) == [] and pool_version(session) == 0
