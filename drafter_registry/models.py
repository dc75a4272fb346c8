"""SQLAlchemy 2 tables of the drafter registry.

- `drafters`: one row per drafter the operator registered, with its kind, its source (Hugging
  Face repo or local directory), download progress and lifecycle status. `kind` is `eagle3` (a
  neural drafter with weights to fetch) or the name of a model-free drafter (`ngram`, `suffix`:
  no weights, source `none`, its integer parameters in `params`). The registry stores a
  model-free kind and its parameters as given: which kinds exist and which parameters they take
  is the engine's business (`core.speculation.model_free.kinds`), checked by the gateway before it
  writes.
- `audit_events`: who changed what and when; every mutation in `crud` writes one row.
- `registry_state`: a single row holding `pool_version`, bumped in the same transaction as every
  change that can alter the serving pool. Gateway replicas poll it (one indexed read) and
  re-sync their engine pool when it moves; see `db.pool_version`.
- `request_logs`: per-request speculative-decoding statistics, written off the hot path by
  `request_log.RequestLogWriter`.
- `responses`: Responses API objects created with `store` (the default), their input items and
  the conversation they continue; private to the API key that created them (`owner`, a digest
  prefix, never the key) and purged after the retention period (`responses.py`).

Status lifecycle of a drafter:

    pending ──▶ downloading ──▶ validating ──▶ ready
       ▲             │               │
       └── retry ◀── failed ◀────────┘          (any state) ──▶ disabled ──▶ pending | ready

A model-free drafter has nothing to download or validate: it is registered `ready`, and
enabling or retrying it returns it to `ready` (the pool sync builds it; a replica that cannot,
e.g. one that does not know the kind, marks it `failed` with the reason).

Constraint names follow a fixed convention so Alembic migrations stay stable across backends.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments an `INTEGER PRIMARY KEY`; PostgreSQL gets a 64-bit identity.
BigIntPK = BigInteger().with_variant(Integer(), "sqlite")


class DrafterSource(str, Enum):
    HF = "hf"
    LOCAL = "local"
    NONE = "none"  # a model-free drafter: no weights


EAGLE3_KIND = "eagle3"  # the one kind with weights; every other kind is model-free


class DrafterStatus(str, Enum):
    PENDING = "pending"
    DOWNLOADING = "downloading"
    VALIDATING = "validating"
    READY = "ready"
    FAILED = "failed"
    DISABLED = "disabled"


# Work still to do for a fetcher: resumed after a crash or restart.
UNFINISHED_STATUSES = frozenset(
    {DrafterStatus.PENDING, DrafterStatus.DOWNLOADING, DrafterStatus.VALIDATING}
)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps on every backend (SQLite drops the offset on storage)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(timezone.utc)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return (value.replace(tzinfo=timezone.utc) if value.tzinfo is None
                else value.astimezone(timezone.utc))


def _check_in(column: str, values: type[Enum]) -> str:
    return f"{column} IN ({', '.join(repr(v.value) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Drafter(Base):
    __tablename__ = "drafters"
    __table_args__ = (
        CheckConstraint(_check_in("source", DrafterSource), name="source"),
        CheckConstraint(_check_in("status", DrafterStatus), name="status"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    kind: Mapped[str] = mapped_column(String(32), default=EAGLE3_KIND,
                                      server_default=EAGLE3_KIND)
    # A model-free drafter's parameters, all of them (defaults filled in); None for eagle3.
    params: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    source: Mapped[str] = mapped_column(String(8))
    repo_id: Mapped[str | None] = mapped_column(String(256))
    revision: Mapped[str | None] = mapped_column(String(255))
    subfolder: Mapped[str | None] = mapped_column(String(512))
    # Filled by the fetcher: the commit `revision` resolved to, and the directory with the weights.
    commit_sha: Mapped[str | None] = mapped_column(String(64))
    local_path: Mapped[str | None] = mapped_column(Text)
    target_model: Mapped[str | None] = mapped_column(String(512))
    domain: Mapped[str | None] = mapped_column(String(64))
    tags: Mapped[list[str]] = mapped_column(JSON, default=list)
    status: Mapped[str] = mapped_column(String(16), default=DrafterStatus.PENDING.value, index=True)
    error: Mapped[str | None] = mapped_column(Text)
    bytes_done: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_total: Mapped[int | None] = mapped_column(BigInteger)
    # Result of the last successful validation (shapes, vocab sizes, ...), shown by the admin API.
    inspection: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)
    # Set when the drafter first became ready: re-enabling skips the download only if it has.
    ready_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    @property
    def model_free(self) -> bool:
        """No weights: nothing to download or validate (see the module docstring)."""
        return self.kind != EAGLE3_KIND


class AuditEvent(Base):
    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str | None] = mapped_column(String(128), index=True)
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class RegistryState(Base):
    __tablename__ = "registry_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    pool_version: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


REGISTRY_STATE_ID = 1


class RequestLog(Base):
    __tablename__ = "request_logs"
    __table_args__ = (Index("ix_request_logs_created_at", "created_at"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    model: Mapped[str | None] = mapped_column(String(256))
    policy: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default="ok")
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    rounds: Mapped[int] = mapped_column(Integer, default=0)
    # MAT: tokens committed per verification pass, the bonus token included.
    mat: Mapped[float | None] = mapped_column(Float)
    regret_tokens: Mapped[float | None] = mapped_column(Float)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    ttft_ms: Mapped[float | None] = mapped_column(Float)
    drafter_choices: Mapped[list[str] | None] = mapped_column(JSON)
    # Only written when the operator enabled prompt logging.
    prompt: Mapped[str | None] = mapped_column(Text)
    extra: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class StoredResponse(Base):
    """One `/v1/responses` response kept for retrieval and `previous_response_id`."""

    __tablename__ = "responses"
    __table_args__ = (
        Index("ix_responses_created_at", "created_at"),
        Index("ix_responses_owner", "owner"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    status: Mapped[str] = mapped_column(String(16))
    model: Mapped[str | None] = mapped_column(String(256))
    previous_response_id: Mapped[str | None] = mapped_column(String(64))
    # The engine's learner-session key the conversation runs under (drafter choice carries over).
    session: Mapped[str | None] = mapped_column(String(512))
    # The response object as `GET /v1/responses/{id}` returns it.
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    # This request's input items (with ids), as `GET /v1/responses/{id}/input_items` lists them.
    input_items: Mapped[list[Any]] = mapped_column(JSON)
    # The whole conversation as chat messages, through this response's output: what a request
    # with `previous_response_id` continues (instructions are not carried over, as OpenAI's).
    history: Mapped[list[Any]] = mapped_column(JSON)
