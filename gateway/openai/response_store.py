"""The Responses API's state in the registry database (`drafter_registry.responses`), as the
event loop uses it: every call runs on a thread, and an unavailable database is a 503
`registry_unavailable` (the gateway serves without one; stored state needs it).

Retention: responses older than `responses_retention_days` are purged at most once an hour,
on the next write; 0 keeps them until they are deleted.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from drafter_registry import responses as store
from drafter_registry.db import make_session_factory
from drafter_registry.models import utcnow
from gateway.errors import APIError, registry_unavailable
from gateway.pool.database import RegistryLink

log = logging.getLogger(__name__)
PURGE_EVERY_S = 3600.0


@dataclass(frozen=True)
class StoredRecord:
    """A stored response as the serving class reads it (plain data, off the session)."""

    id: str
    status: str
    body: dict[str, Any]
    input_items: list[Any]
    history: list[Any]
    session: str | None


def response_not_found(response_id: str, param: str | None = None) -> APIError:
    """OpenAI's answer for an id that is absent, purged, deleted or another key's."""
    return APIError(f"Response with id '{response_id}' not found.", status=404, param=param,
                    code="not_found")


MAX_ID_CHARS = 64  # the `responses.id` column's width


def possible_id(response_id: str) -> bool:
    """Whether `response_id` could be one this server minted: it fits the column and holds no
    NUL (PostgreSQL refuses NUL in text; asking would be a 500, not the 404 it is)."""
    return len(response_id) <= MAX_ID_CHARS and "\x00" not in response_id


class ResponseStore:
    def __init__(self, link: RegistryLink, retention_days: float) -> None:
        self.link = link
        self.retention_days = retention_days
        self._factory: sessionmaker[Session] | None = None
        self._factory_engine: Any = None
        self._next_purge = 0.0
        self._lock = threading.Lock()

    def _sessions(self) -> sessionmaker[Session]:
        engine = self.link.engine
        if engine is None:
            raise registry_unavailable(self.link.error)
        with self._lock:
            if self._factory is None or self._factory_engine is not engine:
                self._factory, self._factory_engine = make_session_factory(engine), engine
            return self._factory

    def check_available(self) -> None:
        """Raise the 503 before any work when a stored response could not be kept."""
        self._sessions()

    async def load(self, response_id: str, owner: str) -> StoredRecord | None:
        if not possible_id(response_id):
            return None
        return await asyncio.to_thread(self._load, response_id, owner)

    async def save(self, **fields: Any) -> None:
        await asyncio.to_thread(self._save, fields)

    async def delete(self, response_id: str, owner: str) -> bool:
        if not possible_id(response_id):
            return False
        return await asyncio.to_thread(self._delete, response_id, owner)

    # ---- on a thread -----------------------------------------------------------------------

    def _load(self, response_id: str, owner: str) -> StoredRecord | None:
        with self._sessions()() as session:
            row = store.get_response(session, response_id=response_id, owner=owner)
            if row is None or self._expired(row.created_at):
                return None
            return StoredRecord(row.id, row.status, dict(row.body), list(row.input_items),
                                list(row.history), row.session)

    def _save(self, fields: dict[str, Any]) -> None:
        with self._sessions()() as session:
            store.save_response(session, **fields)
        self._maybe_purge()

    def _delete(self, response_id: str, owner: str) -> bool:
        with self._sessions()() as session:
            return store.delete_response(session, response_id=response_id, owner=owner)

    def _expired(self, created_at: Any) -> bool:
        """Past retention but not purged yet: already gone to the client."""
        if not self.retention_days:
            return False
        return bool(created_at < utcnow() - timedelta(days=self.retention_days))

    def _maybe_purge(self) -> None:
        if not self.retention_days or time.monotonic() < self._next_purge:
            return
        self._next_purge = time.monotonic() + PURGE_EVERY_S
        cutoff = utcnow() - timedelta(days=self.retention_days)
        try:
            with self._sessions()() as session:
                purged = store.purge_responses_older_than(session, cutoff=cutoff)
            if purged:
                log.info("purged %d stored responses older than %g days", purged,
                         self.retention_days)
        except Exception:
            log.exception("stored responses retention purge failed")
