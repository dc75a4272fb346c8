"""Request log: batched off-thread writes, prompt opt-in, retention, never blocking when full."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from drafter_registry.db import make_session_factory
from drafter_registry.models import RequestLog
from drafter_registry.request_log import (
    RequestLogWriter,
    logged_regret,
    purge_older_than,
    recent_requests,
    to_row,
)

RECORD = {"request_id": "req-1", "model": "demo", "policy": "auto", "prompt_tokens": 12,
          "completion_tokens": 40, "rounds": 9, "mat": 4.4, "regret_tokens": 1.5,
          "latency_ms": 812.0, "drafter_choices": ["python", "python", "math"],
          "prompt": "def fib(n):", "user": "alice"}


def count(factory: sessionmaker[Session]) -> int:
    with factory() as s:
        return int(s.scalar(select(func.count()).select_from(RequestLog)) or 0)


def test_rows_map_known_fields_and_keep_the_rest_in_extra() -> None:
    row = to_row(RECORD, store_prompts=False)
    assert "prompt" not in row and row["extra"] == {"user": "alice"}
    assert row["status"] == "ok" and row["created_at"].tzinfo is not None
    assert to_row(RECORD, store_prompts=True)["prompt"] == "def fib(n):"
    assert (to_row({"created_at": 0}, store_prompts=False)["created_at"]
            == datetime(1970, 1, 1, tzinfo=timezone.utc))
    assert len(to_row({}, store_prompts=False)["request_id"]) == 32


def test_the_logged_regret_is_the_learners_in_its_unit() -> None:
    """Under the time loss the gateway logs the regret in seconds (in `extra`) and the token
    column stays empty; under an acceptance loss the token column holds it."""
    timed = RequestLog(**to_row({**RECORD, "regret_tokens": None, "regret_seconds": -0.25},
                                store_prompts=False))
    assert logged_regret(timed) == (-0.25, "s")
    assert logged_regret(RequestLog(**to_row(RECORD, store_prompts=False))) == (1.5, "tokens")


def test_batches_are_written_off_thread(session_factory: sessionmaker[Session]) -> None:
    writer = RequestLogWriter(session_factory, batch_size=10, flush_interval_s=5.0)
    try:
        for i in range(25):
            assert writer.write({**RECORD, "request_id": f"r{i}"})
        assert writer.flush(timeout=10)
        assert count(session_factory) == 25 and writer.written == 25
        with session_factory() as s:
            newest = recent_requests(s, limit=1)[0]
            assert (newest.request_id, newest.prompt, newest.drafter_choices, newest.extra) == (
                "r24", None, ["python", "python", "math"], {"user": "alice"})
    finally:
        writer.close()


def test_prompts_only_when_enabled(session_factory: sessionmaker[Session]) -> None:
    writer = RequestLogWriter(session_factory, store_prompts=True)
    writer.write(RECORD)
    writer.close()
    with session_factory() as s:
        assert recent_requests(s)[0].prompt == "def fib(n):"
    assert not writer.write(RECORD) and writer.dropped == 1  # closed


def test_the_interval_flushes_partial_batches(session_factory: sessionmaker[Session]) -> None:
    writer = RequestLogWriter(session_factory, batch_size=1000, flush_interval_s=0.05)
    try:
        writer.write(RECORD)
        deadline = time.monotonic() + 10
        while count(session_factory) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert count(session_factory) == 1
    finally:
        writer.close()


def test_a_full_queue_drops_instead_of_blocking(session_factory: sessionmaker[Session]) -> None:
    gate, taken = threading.Event(), threading.Event()

    def slow_factory() -> Session:  # the database stalls until the gate opens
        taken.set()
        gate.wait()
        return session_factory()

    writer = RequestLogWriter(slow_factory, batch_size=1, max_queue=5, retention_days=None)  # type: ignore[arg-type]
    writer.write(RECORD)
    assert taken.wait(30)  # the thread has taken it and waits on the database
    started = time.perf_counter()
    accepted = [writer.write({**RECORD, "request_id": f"r{i}"}) for i in range(20)]
    # a blocking write would wait for the gate forever; the bound is generous for a starved CI
    assert time.perf_counter() - started < 2.0
    assert accepted.count(True) == 5 and writer.dropped == 15
    gate.set()
    writer.close()
    assert count(session_factory) == 6


def test_database_errors_are_counted_not_raised(tmp_path: object) -> None:
    empty = create_engine("sqlite://")  # no tables: every insert fails
    writer = RequestLogWriter(make_session_factory(empty), retention_days=None)
    writer.write(RECORD)
    assert writer.flush(timeout=10)
    writer.write(RECORD)
    writer.close()
    assert (writer.written, writer.failed) == (0, 2)


def test_retention(session_factory: sessionmaker[Session]) -> None:
    now = datetime.now(timezone.utc)
    writer = RequestLogWriter(session_factory, retention_days=None)
    writer.write({**RECORD, "request_id": "old", "created_at": now - timedelta(days=10)})
    writer.write({**RECORD, "request_id": "new", "created_at": now})
    writer.close()
    with session_factory() as s:
        assert purge_older_than(s, cutoff=now - timedelta(days=7)) == 1
        assert [r.request_id for r in recent_requests(s)] == ["new"]
    # The writer purges on its own at start (then hourly).
    with session_factory() as s:
        s.add(RequestLog(request_id="ancient", created_at=now - timedelta(days=30)))
        s.commit()
    writer = RequestLogWriter(session_factory, retention_days=7)
    writer.flush()
    writer.close()
    assert writer.purged == 1 and count(session_factory) == 1
