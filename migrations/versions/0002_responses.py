"""Responses API state: the `responses` table (stored responses, their input items and the
conversation each continues).

Revision ID: 0002_responses
Revises: 0001_initial
Create Date: 2026-02-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_responses"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copy of the model type: a migration must not change when models.py does.
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "responses",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("model", sa.String(256), nullable=True),
        sa.Column("previous_response_id", sa.String(64), nullable=True),
        sa.Column("session", sa.String(512), nullable=True),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("input_items", sa.JSON(), nullable=False),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_responses")),
    )
    op.create_index("ix_responses_created_at", "responses", ["created_at"])
    op.create_index("ix_responses_owner", "responses", ["owner"])


def downgrade() -> None:
    op.drop_index("ix_responses_owner", table_name="responses")
    op.drop_index("ix_responses_created_at", table_name="responses")
    op.drop_table("responses")
