"""Stored Responses API objects (`responses` table): keyword-only CRUD, scoped to an owner.

A row is one response created with `store` (the default): the response object as retrieved,
the request's input items, and the conversation through its output (chat messages), which a
request naming it as `previous_response_id` continues. Every read and delete takes the `owner`
(the API key's digest prefix) and treats another owner's row as absent, so one key can neither
read nor probe another's responses. Rows older than the retention period are purged by
`purge_responses_older_than` (the gateway runs it at most hourly).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from drafter_registry.models import StoredResponse, utcnow


def save_response(
    session: Session,
    *,
    response_id: str,
    owner: str,
    status: str,
    model: str | None,
    body: dict[str, Any],
    input_items: list[Any],
    history: list[Any],
    previous_response_id: str | None = None,
    learner_session: str | None = None,
    created_at: datetime | None = None,
) -> StoredResponse:
    """Insert or replace one response (a stream stores it when it ends)."""
    row = session.get(StoredResponse, response_id)
    if row is None:
        row = StoredResponse(id=response_id, created_at=created_at or utcnow())
        session.add(row)
    row.owner = owner
    row.status = status
    row.model = model
    row.body = body
    row.input_items = input_items
    row.history = history
    row.previous_response_id = previous_response_id
    row.session = learner_session
    session.commit()
    return row


def get_response(session: Session, *, response_id: str, owner: str) -> StoredResponse | None:
    """The owner's response, or None (absent, purged, or another key's)."""
    row = session.get(StoredResponse, response_id)
    return row if row is not None and row.owner == owner else None


def delete_response(session: Session, *, response_id: str, owner: str) -> bool:
    """Delete the owner's response; False when there was none to delete."""
    result = session.execute(
        delete(StoredResponse).where(StoredResponse.id == response_id,
                                     StoredResponse.owner == owner)
    )
    session.commit()
    return bool(getattr(result, "rowcount", 0))


def purge_responses_older_than(session: Session, *, cutoff: datetime) -> int:
    """Delete responses created before `cutoff`; returns how many."""
    result = session.execute(delete(StoredResponse).where(StoredResponse.created_at < cutoff))
    session.commit()
    return int(getattr(result, "rowcount", 0) or 0)


def list_response_ids(session: Session, *, owner: str) -> list[str]:
    """The owner's stored response ids, oldest first (tests and operators)."""
    query = select(StoredResponse.id).where(StoredResponse.owner == owner)
    return list(session.scalars(query.order_by(StoredResponse.created_at)))
