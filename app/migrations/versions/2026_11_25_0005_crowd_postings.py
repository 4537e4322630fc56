"""crowd postings: what was published on which platform, and every money call

New tables only (`crowd_postings`, `crowd_hits`, `crowd_calls`); no data changes.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 12:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "crowd_postings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(length=16), nullable=False),
        sa.Column("environment", sa.String(length=16), nullable=False),
        sa.Column("external_id", sa.String(length=255), nullable=True),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_by_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("synced_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["created_by_id"],
            ["users.id"],
            name=op.f("fk_crowd_postings_created_by_id_users"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["studies.id"],
            name=op.f("fk_crowd_postings_study_id_studies"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_crowd_postings")),
        sa.UniqueConstraint(
            "study_id",
            "provider",
            "environment",
            name=op.f("uq_crowd_postings_study_id_provider_environment"),
        ),
    )
    with op.batch_alter_table("crowd_postings", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_crowd_postings_study_id"), ["study_id"], unique=False)

    op.create_table(
        "crowd_hits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("posting_id", sa.Integer(), nullable=False),
        sa.Column("hit_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("request_token", sa.String(length=64), nullable=False),
        sa.Column("external_hit_id", sa.String(length=255), nullable=True),
        sa.Column("max_assignments", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["hit_id"], ["hits.id"], name=op.f("fk_crowd_hits_hit_id_hits"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["posting_id"],
            ["crowd_postings.id"],
            name=op.f("fk_crowd_hits_posting_id_crowd_postings"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_crowd_hits")),
        sa.UniqueConstraint("posting_id", "hit_id", name=op.f("uq_crowd_hits_posting_id_hit_id")),
        sa.UniqueConstraint("request_token", name=op.f("uq_crowd_hits_request_token")),
    )
    with op.batch_alter_table("crowd_hits", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_crowd_hits_external_hit_id"), ["external_hit_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_crowd_hits_hit_id"), ["hit_id"], unique=False)

    op.create_table(
        "crowd_calls",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("posting_id", sa.Integer(), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=True),
        sa.Column("annotator_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("request_token", sa.String(length=64), nullable=False),
        sa.Column("amount_cents", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("by", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["annotator_id"],
            ["annotators.id"],
            name=op.f("fk_crowd_calls_annotator_id_annotators"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["assignment_id"],
            ["assignments.id"],
            name=op.f("fk_crowd_calls_assignment_id_assignments"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["posting_id"],
            ["crowd_postings.id"],
            name=op.f("fk_crowd_calls_posting_id_crowd_postings"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_crowd_calls")),
        sa.UniqueConstraint("request_token", name=op.f("uq_crowd_calls_request_token")),
    )
    with op.batch_alter_table("crowd_calls", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_crowd_calls_assignment_id"), ["assignment_id"], unique=False
        )
        batch_op.create_index("ix_crowd_calls_posting_kind", ["posting_id", "kind"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("crowd_calls", schema=None) as batch_op:
        batch_op.drop_index("ix_crowd_calls_posting_kind")
        batch_op.drop_index(batch_op.f("ix_crowd_calls_assignment_id"))

    op.drop_table("crowd_calls")
    with op.batch_alter_table("crowd_hits", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_crowd_hits_hit_id"))
        batch_op.drop_index(batch_op.f("ix_crowd_hits_external_hit_id"))

    op.drop_table("crowd_hits")
    with op.batch_alter_table("crowd_postings", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_crowd_postings_study_id"))

    op.drop_table("crowd_postings")
