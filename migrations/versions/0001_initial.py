"""Initial registry schema: drafters, audit events, registry state, request logs.

Revision ID: 0001_initial
Revises:
Create Date: 2025-11-29
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types: a migration must not change when models.py does.
BIG_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    _create_drafters()
    _create_audit_events()
    _create_registry_state()
    _create_request_logs()


def _create_drafters() -> None:
    op.create_table(
        "drafters",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("source", sa.String(8), nullable=False),
        sa.Column("repo_id", sa.String(256), nullable=True),
        sa.Column("revision", sa.String(255), nullable=True),
        sa.Column("subfolder", sa.String(512), nullable=True),
        sa.Column("commit_sha", sa.String(64), nullable=True),
        sa.Column("local_path", sa.Text(), nullable=True),
        sa.Column("target_model", sa.String(512), nullable=True),
        sa.Column("domain", sa.String(64), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("bytes_done", sa.BigInteger(), nullable=False),
        sa.Column("bytes_total", sa.BigInteger(), nullable=True),
        sa.Column("inspection", sa.JSON(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.Column("ready_at", TIMESTAMP, nullable=True),
        sa.CheckConstraint("source IN ('hf', 'local')", name=op.f("ck_drafters_source")),
        sa.CheckConstraint(
            "status IN ('pending', 'downloading', 'validating', 'ready', 'failed', 'disabled')",
            name=op.f("ck_drafters_status"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_drafters")),
        sa.UniqueConstraint("name", name=op.f("uq_drafters_name")),
    )
    op.create_index(op.f("ix_drafters_status"), "drafters", ["status"])


def _create_audit_events() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", BIG_PK, autoincrement=True, nullable=False),
        sa.Column("at", TIMESTAMP, nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(128), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    op.create_index(op.f("ix_audit_events_at"), "audit_events", ["at"])
    op.create_index(op.f("ix_audit_events_target"), "audit_events", ["target"])


def _create_registry_state() -> None:
    state = op.create_table(
        "registry_state",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("pool_version", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_registry_state")),
    )
    # The single counter row exists from the start, so bumps are plain UPDATEs.
    op.bulk_insert(state, [{"id": 1, "pool_version": 0, "updated_at": datetime.now(timezone.utc)}])


def _create_request_logs() -> None:
    op.create_table(
        "request_logs",
        sa.Column("id", BIG_PK, autoincrement=True, nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("model", sa.String(256), nullable=True),
        sa.Column("policy", sa.String(64), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("mat", sa.Float(), nullable=True),
        sa.Column("regret_tokens", sa.Float(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("ttft_ms", sa.Float(), nullable=True),
        sa.Column("drafter_choices", sa.JSON(), nullable=True),
        sa.Column("prompt", sa.Text(), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_request_logs")),
    )
    op.create_index("ix_request_logs_created_at", "request_logs", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_request_logs_created_at", table_name="request_logs")
    op.drop_table("request_logs")
    op.drop_table("registry_state")
    op.drop_index(op.f("ix_audit_events_target"), table_name="audit_events")
    op.drop_index(op.f("ix_audit_events_at"), table_name="audit_events")
    op.drop_table("audit_events")
    op.drop_index(op.f("ix_drafters_status"), table_name="drafters")
    op.drop_table("drafters")
