"""reference model: synthetic EB-C with a second model as P_D

Two nullable JSON columns: `studies.reference` (the reference section of the study file)
and `items.reference` (the divergences the worker computed for an item). Existing rows keep
NULL, which means "no reference model". And `annotators.simulated` (false for every existing
annotator): a simulated crowd's annotators, labelled as such in results.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 15:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ALTER TABLE ... ADD COLUMN, not batch mode: on SQLite a batch-mode copy of
    # `studies`, `items` or `annotators` drops the old table, and ON DELETE CASCADE would
    # take every HIT, assignment and judgment with it.
    op.add_column("studies", sa.Column("reference", sa.JSON(), nullable=True))
    op.add_column("items", sa.Column("reference", sa.JSON(), nullable=True))
    op.add_column(
        "annotators",
        sa.Column("simulated", sa.Boolean(), server_default=sa.false(), nullable=False),
    )


def downgrade() -> None:
    # In place (SQLite >= 3.35 drops a column without copying the table), for the same reason.
    for table, column in (
        ("annotators", "simulated"),
        ("items", "reference"),
        ("studies", "reference"),
    ):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
