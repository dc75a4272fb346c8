"""Drafter kinds: `drafters.kind` (`eagle3`, or a model-free kind such as `ngram`), `params`
(a model-free drafter's parameters) and source `none` (no weights) in the source check.

Existing rows become `eagle3` drafters through the column's server default; their `params` stay
NULL. SQLite cannot alter a CHECK constraint in place: batch mode copies the table (rows,
indexes and the other constraints kept).

Revision ID: 0003_drafter_kinds
Revises: 0002_responses
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_drafter_kinds"
down_revision: str | None = "0002_responses"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the constraint texts: a migration must not change when models.py does.
SOURCES_BEFORE = "source IN ('hf', 'local')"
SOURCES_AFTER = "source IN ('hf', 'local', 'none')"


def upgrade() -> None:
    with op.batch_alter_table("drafters") as batch:
        batch.add_column(sa.Column("kind", sa.String(32), nullable=False,
                                   server_default="eagle3"))
        batch.add_column(sa.Column("params", sa.JSON(), nullable=True))
        batch.drop_constraint(op.f("ck_drafters_source"), type_="check")
        batch.create_check_constraint(op.f("ck_drafters_source"), SOURCES_AFTER)


def downgrade() -> None:
    # Model-free drafters cannot be expressed in the older schema: they are dropped.
    op.execute("DELETE FROM drafters WHERE kind <> 'eagle3' OR source = 'none'")
    with op.batch_alter_table("drafters") as batch:
        batch.drop_constraint(op.f("ck_drafters_source"), type_="check")
        batch.create_check_constraint(op.f("ck_drafters_source"), SOURCES_BEFORE)
        batch.drop_column("params")
        batch.drop_column("kind")
