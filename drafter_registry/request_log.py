"""Per-request statistics log, written off the hot path in batches, with retention.

The engine side calls `RequestLogWriter.write(record)` once per finished request. That call only
puts the record on a bounded in-memory queue and never blocks: when the queue is full (database
down or too slow) the record is dropped and counted in `dropped`, because serving matters more
than the log. A daemon thread drains the queue, inserting up to `batch_size` rows per transaction
at least every `flush_interval_s`, and deletes rows older than `retention_days` once an hour.

Prompt text is stored only when the operator enables `store_prompts`; otherwise a `prompt` key
in the record is discarded before it reaches the queue.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session, sessionmaker

from drafter_registry.models import RequestLog, utcnow

logger = logging.getLogger(__name__)

# The record keys that are `request_logs` columns (the model's, so they cannot drift from it);
# every other key of a record goes to `extra`.
COLUMNS = frozenset(RequestLog.__table__.columns.keys()) - {"id", "extra"}
DEFAULTS: dict[str, Any] = {"status": "ok", "prompt_tokens": 0, "completion_tokens": 0, "rounds": 0}
PURGE_EVERY_S = 3600.0


def to_row(record: Mapping[str, Any], *, store_prompts: bool) -> dict[str, Any]:
    """A `request_logs` row from a record: known keys become columns, the rest goes to `extra`."""
    row = {**DEFAULTS, **{k: v for k, v in record.items() if k in COLUMNS}}
    extra = {k: v for k, v in record.items() if k not in COLUMNS}
    row["request_id"] = str(row.get("request_id") or uuid.uuid4().hex)[:64]
    created = row.get("created_at")
    if isinstance(created, (int, float)):
        row["created_at"] = datetime.fromtimestamp(created, timezone.utc)
    elif not isinstance(created, datetime):
        row["created_at"] = utcnow()
    if not store_prompts:
        row.pop("prompt", None)
    if row.get("drafter_choices") is not None:
        row["drafter_choices"] = [str(c) for c in row["drafter_choices"]]
    row["extra"] = extra or None
    # Absent rather than None: None in a JSON column would be stored as JSON `null`, not NULL.
    return {k: v for k, v in row.items() if v is not None}


def purge_older_than(session: Session, *, cutoff: datetime) -> int:
    """Delete request logs created before `cutoff`; returns how many."""
    result = session.execute(delete(RequestLog).where(RequestLog.created_at < cutoff))
    session.commit()
    return int(getattr(result, "rowcount", 0) or 0)


def recent_requests(session: Session, *, limit: int = 100) -> list[RequestLog]:
    """The newest request logs first (for the admin page)."""
    query = select(RequestLog).order_by(RequestLog.id.desc()).limit(max(1, min(limit, 1000)))
    return list(session.scalars(query))


def logged_regret(log: RequestLog) -> tuple[float | None, str]:
    """A logged request's regret as its learner minimised it, and its unit: the seconds the
    gateway keeps in `extra` under the time loss, else the `regret_tokens` column."""
    seconds = (log.extra or {}).get("regret_seconds")
    if isinstance(seconds, int | float):
        return float(seconds), "s"
    return log.regret_tokens, "tokens"


def plain_step_indices(log: RequestLog) -> list[Any]:
    """The step indices of a logged request's plain steps (the record's `plain_step_indices`,
    kept in `extra`, where the gateway's request log writes them); empty when none were."""
    indices = (log.extra or {}).get("plain_step_indices")
    return list(indices) if isinstance(indices, list) else []


@dataclass
class _Flush:
    done: threading.Event = field(default_factory=threading.Event)


_STOP = object()


class RequestLogWriter:
    def __init__(
        self,
        session_factory: sessionmaker[Session],
        *,
        batch_size: int = 64,
        flush_interval_s: float = 1.0,
        retention_days: float | None = 7,
        store_prompts: bool = False,
        max_queue: int = 10_000,
    ) -> None:
        self._session_factory = session_factory
        self.batch_size, self.flush_interval_s = batch_size, flush_interval_s
        self.retention_days, self.store_prompts = retention_days, store_prompts
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queue)
        self.written = self.dropped = self.failed = self.purged = 0
        self._closed = False
        self._next_purge = 0.0
        self._thread = threading.Thread(target=self._run, name="request-log", daemon=True)
        self._thread.start()

    def write(self, record: Mapping[str, Any]) -> bool:
        """Queue one record without blocking; `False` if it was dropped (queue full or closed)."""
        if self._closed:
            self.dropped += 1
            return False
        try:
            self._queue.put_nowait(to_row(record, store_prompts=self.store_prompts))
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Block until every record queued before this call is written (or failed)."""
        marker = _Flush()
        self._queue.put(marker)
        return marker.done.wait(timeout)

    def close(self, timeout: float | None = 10.0) -> None:
        """Write what is queued, then stop the thread; later writes are dropped."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout)

    # --- the writer thread -----------------------------------------------------------------

    def _run(self) -> None:
        batch: list[dict[str, Any]] = []
        deadline = time.monotonic() + self.flush_interval_s
        while True:
            self._maybe_purge()
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                item = None
            if isinstance(item, dict):
                batch.append(item)
                if len(batch) < self.batch_size:
                    continue
            self._insert(batch)
            batch = []
            deadline = time.monotonic() + self.flush_interval_s
            if isinstance(item, _Flush):
                item.done.set()
            elif item is _STOP:
                return

    def _insert(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        try:
            with self._session_factory() as session:
                session.execute(insert(RequestLog), rows)
                session.commit()
            self.written += len(rows)
        except Exception:
            # Never retried: a database that is down must not grow memory or stall shutdown.
            self.failed += len(rows)
            logger.exception("could not write %d request logs", len(rows))

    def _maybe_purge(self) -> None:
        if not self.retention_days or time.monotonic() < self._next_purge:
            return
        self._next_purge = time.monotonic() + PURGE_EVERY_S
        cutoff = utcnow() - timedelta(days=self.retention_days)
        try:
            with self._session_factory() as session:
                self.purged += purge_older_than(session, cutoff=cutoff)
        except Exception:
            logger.exception("request log retention purge failed")
