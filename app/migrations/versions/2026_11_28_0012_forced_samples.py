"""forced-prefix samples: what the model writes after each forced-prefix kind

Issue 34. New table `forced_samples` (one row per sample: length, kind, index, source,
prompt, forced prefix, continuation, reference, sentence scores, provenance; unique per
study, length, kind and index, so a re-run stores nothing twice) and the nullable column
`studies.samples` (the study file's `[samples]` section; NULL before: no samples). No data
changes. Reversible.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28 14:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "forced_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("prompt", sa.Text(), nullable=True),
        sa.Column("prefix", sa.Text(), nullable=False),
        sa.Column("continuation", sa.Text(), nullable=True),
        sa.Column("reference", sa.Text(), nullable=True),
        sa.Column("skip_reason", sa.String(length=32), nullable=True),
        sa.Column("scores", sa.JSON(), nullable=True),
        sa.Column("provenance", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["studies.id"],
            name=op.f("fk_forced_samples_study_id_studies"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_forced_samples")),
        sa.UniqueConstraint(
            "study_id",
            "length",
            "kind",
            "index",
            name=op.f("uq_forced_samples_study_id_length_kind_index"),
        ),
    )
    op.create_index(op.f("ix_forced_samples_study_id"), "forced_samples", ["study_id"])
    # Plain ALTER TABLE ... ADD COLUMN, never a batch-mode table copy (see revision 0006).
    op.add_column("studies", sa.Column("samples", sa.JSON(), nullable=True))


def downgrade() -> None:
    # In place (see 0011): DROP COLUMN works on SQLite >= 3.35 and on PostgreSQL.
    op.drop_column("studies", "samples")
    op.drop_index(op.f("ix_forced_samples_study_id"), table_name="forced_samples")
    op.drop_table("forced_samples")
