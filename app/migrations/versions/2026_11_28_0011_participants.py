"""participants: consent, comments, page signals, exclusion of earlier studies' people

Issue 33. Nullable columns only: `studies.participants` (the study file's
`[participants]` section: consent text, comment boxes, earlier studies excluded),
`annotators.consented_at` (when the consent text was accepted), `annotators.comment` and
`commented_at` (the end-of-study comment), `assignments.comment` (a HIT's comment) and
`assignments.page_signals` (times and milliseconds away from the page, per item, where
the page's script ran). Studies made before it have no consent page and their people
consented to nothing here (NULL). Reversible.

Revision ID: 0011
Revises: 0009
Create Date: 2026-11-28 11:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("studies", sa.Column("participants", sa.JSON(), nullable=True))
    op.add_column("annotators", sa.Column("consented_at", TIME, nullable=True))
    op.add_column("annotators", sa.Column("comment", sa.Text(), nullable=True))
    op.add_column("annotators", sa.Column("commented_at", TIME, nullable=True))
    op.add_column("assignments", sa.Column("comment", sa.Text(), nullable=True))
    op.add_column("assignments", sa.Column("page_signals", sa.JSON(), nullable=True))


_ADDED = {
    "assignments": ("page_signals", "comment"),
    "annotators": ("commented_at", "comment", "consented_at"),
    "studies": ("participants",),
}


def downgrade() -> None:
    # In place, as in 0004 and 0008: on SQLite a batch-mode copy of `annotators` drops the old
    # table, and with foreign keys on that deletes every assignment through ON DELETE CASCADE.
    # ALTER TABLE ... DROP COLUMN works in place on SQLite >= 3.35 and on PostgreSQL.
    for table, columns in _ADDED.items():
        for column in columns:
            op.drop_column(table, column)
