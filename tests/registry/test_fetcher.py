"""Background fetching end to end: fake hub -> HF cache -> checks -> `ready`, or `failed` with a
readable error while the serving pool stays as it was."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from bench.harness.checkpoints import drafter_files, write_files, write_target_config
from bench.harness.fakehub import FakeHub
from drafter_registry import crud
from drafter_registry.db import pool_version
from drafter_registry.fetcher import DrafterFetcher, FetchSettings, ensure_local_copy, fetch_drafter

REPO = "org/drafters"


@pytest.fixture
def settings(fake_hub: FakeHub, hub_cache: Path, tmp_path: Path) -> FetchSettings:
    fake_hub.add_repo(REPO, {**drafter_files("python", seed=1), **drafter_files("wide", hidden=32),
                             "broken/config.json": b"{}",
                             "broken/model.safetensors": b"\x08" + b"\0" * 7})
    return FetchSettings(cache_dir=hub_cache, endpoint=fake_hub.url,
                         target_dir=write_target_config(tmp_path / "target"),
                         progress_interval_s=0.0)


def add(session: Session, name: str, **fields: Any) -> str:
    spec = {"source": "hf", "repo_id": REPO, **fields}
    return crud.create_drafter(session, name=name, actor="admin", **spec).id


def row(factory: sessionmaker[Session], drafter_id: str) -> Any:
    with factory() as s:
        return crud.get_drafter(s, drafter_id=drafter_id)


def test_an_hf_drafter_goes_to_ready(session_factory: sessionmaker[Session],
                                     settings: FetchSettings, fake_hub: FakeHub) -> None:
    with session_factory() as s:
        drafter_id = add(s, "Python", subfolder="python")
        before = pool_version(s)
    calls: list[Path] = []

    def validator(path: Path) -> dict[str, Any]:
        calls.append(path)
        return {"compatible": True, "reason": None, "num_parameters": 123}

    assert fetch_drafter(session_factory, drafter_id=drafter_id, settings=settings,
                         validator=validator) == "ready"
    d = row(session_factory, drafter_id)
    assert d.status == "ready" and d.error is None and d.bytes_done == d.bytes_total > 0
    assert d.commit_sha == fake_hub.repos[REPO].refs["main"]
    assert calls == [Path(d.local_path)] and (Path(d.local_path) / "model.safetensors").is_file()
    assert d.inspection["num_parameters"] == 123 and d.inspection["hidden_size"] == 16
    with session_factory() as s:
        steps = [(e.detail or {}).get("to")
                 for e in reversed(crud.list_events(s, target=drafter_id))]
        assert steps == [None, "downloading", "validating", "ready"]
        assert pool_version(s) == before + 3


def test_a_local_drafter_is_validated_in_place(session_factory: sessionmaker[Session],
                                               settings: FetchSettings, tmp_path: Path) -> None:
    path = write_files(tmp_path / "local", drafter_files())
    with session_factory() as s:
        drafter_id = crud.create_drafter(s, name="Local", source="local", path=str(path),
                                         actor="cli").id
    assert fetch_drafter(session_factory, drafter_id=drafter_id, settings=settings) == "ready"
    d = row(session_factory, drafter_id)
    assert (d.local_path, d.commit_sha, d.bytes_total) == (str(path), None, None)


@pytest.mark.parametrize(("fields", "error"), [
    ({"repo_id": "org/missing"}, "repository 'org/missing' not found"),
    ({"subfolder": "python", "revision": "nope"}, "revision not found"),
    ({"subfolder": "chemistry"}, "not found in the repository"),
    ({"subfolder": "broken"}, "model.safetensors is truncated"),
    ({"subfolder": "wide"}, "incompatible with target: hidden size 32 != target hidden size 16"),
    ({"source": "local", "repo_id": None, "path": "/nonexistent/drafter"},
     "drafter directory not found"),
])
def test_failures_are_contained(session_factory: sessionmaker[Session], settings: FetchSettings,
                                fields: dict[str, Any], error: str) -> None:
    with session_factory() as s:
        serving = add(s, "Serving", subfolder="python")
    fetch_drafter(session_factory, drafter_id=serving, settings=settings)
    with session_factory() as s:
        bad = add(s, "Bad", **fields)
    assert fetch_drafter(session_factory, drafter_id=bad, settings=settings) == "failed"
    d = row(session_factory, bad)
    assert d.status == "failed" and error in d.error
    with session_factory() as s:
        assert [x.id for x in crud.list_drafters(s, statuses=["ready"])] == [serving]


@pytest.mark.parametrize(("verdict", "error"), [
    ({"compatible": False, "reason": "vocab size 64 != target vocab size 128"},
     "vocab size 64 != target"),
    (RuntimeError("CUDA out of memory"), "RuntimeError: CUDA out of memory"),
])
def test_the_injected_validator_decides(session_factory: sessionmaker[Session],
                                        settings: FetchSettings, verdict: Any, error: str) -> None:
    def validator(path: Path) -> dict[str, Any]:
        if isinstance(verdict, Exception):
            raise verdict
        return dict(verdict)

    with session_factory() as s:
        drafter_id = add(s, "Python", subfolder="python")
    assert fetch_drafter(session_factory, drafter_id=drafter_id, settings=settings,
                         validator=validator) == "failed"
    assert error in row(session_factory, drafter_id).error


def test_disabling_during_a_download_stops_it(session_factory: sessionmaker[Session],
                                              settings: FetchSettings, fake_hub: FakeHub) -> None:
    fake_hub.add_repo("org/big", drafter_files("python", pad_to=1_000_000))
    # 10 s for the whole file, 0.5 s to the 50 kB this test waits for: the interruption lands
    # long before an uninterrupted fetch would finish, however slow the machine
    fake_hub.throttle_bps = 100_000
    with session_factory() as s:
        drafter_id = add(s, "Big", repo_id="org/big", subfolder="python")
    outcome: list[str | None] = []
    worker = threading.Thread(target=lambda: outcome.append(
        fetch_drafter(session_factory, drafter_id=drafter_id, settings=settings)))
    worker.start()
    deadline = time.monotonic() + 20
    while row(session_factory, drafter_id).bytes_done < 50_000 and time.monotonic() < deadline:
        time.sleep(0.02)
    with session_factory() as s:
        crud.set_enabled(s, drafter_id=drafter_id, enabled=False, actor="admin")
    worker.join(timeout=20)
    assert outcome == [None]
    d = row(session_factory, drafter_id)
    assert d.status == "disabled" and d.bytes_done < d.bytes_total


def test_the_fetcher_resumes_unfinished_drafters(session_factory: sessionmaker[Session],
                                                 settings: FetchSettings) -> None:
    with session_factory() as s:
        pending = add(s, "Pending", subfolder="python")
        interrupted = add(s, "Interrupted", subfolder="python", revision="main")
        crud.start_download(s, drafter_id=interrupted, actor="system")  # as left by a crash
        done = add(s, "Failed", repo_id="org/gone")
        crud.start_download(s, drafter_id=done, actor="system")
        crud.mark_failed(s, drafter_id=done, error="x", actor="system")
    fetcher = DrafterFetcher(session_factory, settings, max_workers=2)
    try:
        assert sorted(fetcher.resume_unfinished()) == sorted([pending, interrupted])
        first = fetcher.submit(pending)
        assert fetcher.submit(pending) is first or first.done()
        assert first.result(timeout=30) in ("ready", None)
        fetcher.submit(interrupted).result(timeout=30)
    finally:
        fetcher.shutdown()
    assert row(session_factory, pending).status == "ready"
    assert row(session_factory, interrupted).status == "ready"
    assert row(session_factory, done).status == "failed"


def test_a_replica_without_the_files_gets_its_own_copy(session_factory: sessionmaker[Session],
                                                       settings: FetchSettings,
                                                       tmp_path: Path) -> None:
    with session_factory() as s:
        drafter_id = add(s, "Python", subfolder="python")
    fetch_drafter(session_factory, drafter_id=drafter_id, settings=settings)
    d = row(session_factory, drafter_id)
    other = FetchSettings(cache_dir=tmp_path / "replica-cache", endpoint=settings.endpoint)
    d.local_path = str(tmp_path / "not-on-this-machine")
    path = ensure_local_copy(d, settings=other)
    assert path.is_relative_to(other.cache_dir.resolve()) and d.commit_sha in path.parts


def test_shutdown_interrupts_a_download_that_the_next_start_resumes(
    session_factory: sessionmaker[Session], settings: FetchSettings, fake_hub: FakeHub
) -> None:
    fake_hub.add_repo("org/big", drafter_files("python", pad_to=1_000_000))
    # 10 s for the whole file, 0.5 s to the 50 kB this test waits for: the interruption lands
    # long before an uninterrupted fetch would finish, however slow the machine
    fake_hub.throttle_bps = 100_000
    with session_factory() as s:
        drafter_id = add(s, "Big", repo_id="org/big", subfolder="python")
    fetcher = DrafterFetcher(session_factory, settings)
    future = fetcher.submit(drafter_id)
    deadline = time.monotonic() + 20
    while row(session_factory, drafter_id).bytes_done < 50_000 and time.monotonic() < deadline:
        time.sleep(0.02)
    started = time.monotonic()
    fetcher.shutdown(wait=True)
    assert time.monotonic() - started < 10.0 and future.result() is None
    interrupted = row(session_factory, drafter_id)
    assert (interrupted.status == "downloading"
            and 0 < interrupted.bytes_done < interrupted.bytes_total)

    fake_hub.throttle_bps = None
    served = sum(fake_hub.bytes_served.values())
    restarted = DrafterFetcher(session_factory, settings)
    try:
        assert restarted.resume_unfinished() == [drafter_id]
        assert restarted.submit(drafter_id).result(timeout=30) == "ready"
    finally:
        restarted.shutdown()
    total = row(session_factory, drafter_id).bytes_total
    assert sum(fake_hub.bytes_served.values()) - served < total  # only the missing part moved
