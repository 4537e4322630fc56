"""ratings studies: continuations, people's ratings of them, and stored automatic scores

New tables `ratings` (one annotator's quality and consistency ratings of one pair) and
`study_scores` (a results job's EB-M document); new columns `studies.study_type`
("nextword" for every existing study), `studies.ratings` (the ratings section, NULL
before) and `items.continuation` (NULL for next-word items). No data changes.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 16:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "study_scores",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("scores", sa.JSON(), nullable=False),
        sa.Column("provenance", sa.JSON(), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["studies.id"],
            name=op.f("fk_study_scores_study_id_studies"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_study_scores")),
    )
    op.create_index(op.f("ix_study_scores_study_id"), "study_scores", ["study_id"])
    op.create_table(
        "ratings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("quality", sa.Double(), nullable=False),
        sa.Column("consistency", sa.Double(), nullable=True),
        sa.Column("quality_ms", sa.Integer(), nullable=True),
        sa.Column("consistency_ms", sa.Integer(), nullable=True),
        sa.Column("quality_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("consistency_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("too_fast", sa.Boolean(), nullable=False),
        sa.Column("late", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["assignment_id"],
            ["assignments.id"],
            name=op.f("fk_ratings_assignment_id_assignments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["item_id"], ["items.id"], name=op.f("fk_ratings_item_id_items"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ratings")),
        sa.UniqueConstraint(
            "assignment_id", "position", name=op.f("uq_ratings_assignment_id_position")
        ),
    )
    op.create_index(op.f("ix_ratings_item_id"), "ratings", ["item_id"])
    # Plain ALTER TABLE ... ADD COLUMN, never a batch-mode table copy (see revision 0006).
    op.add_column("items", sa.Column("continuation", sa.Text(), nullable=True))
    op.add_column(
        "studies",
        sa.Column(
            "study_type",
            sa.Enum("nextword", "ratings", name="studytype", native_enum=False, length=32),
            server_default="nextword",
            nullable=False,
        ),
    )
    op.add_column("studies", sa.Column("ratings", sa.JSON(), nullable=True))


def downgrade() -> None:
    for table, column in (
        ("studies", "ratings"),
        ("studies", "study_type"),
        ("items", "continuation"),
    ):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    op.drop_index(op.f("ix_ratings_item_id"), table_name="ratings")
    op.drop_table("ratings")
    op.drop_index(op.f("ix_study_scores_study_id"), table_name="study_scores")
    op.drop_table("study_scores")
