"""access and flags: session epochs, study members, opaque invite nonces, kept-but-flagged work

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch_op:
        batch_op.add_column(
            sa.Column("session_epoch", sa.Integer(), server_default="0", nullable=False)
        )
    op.create_table(
        "study_members",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["study_id"], ["studies.id"],
            name="fk_study_members_study_id_studies", ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_study_members_user_id_users", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_study_members"),
        sa.UniqueConstraint("study_id", "user_id", name="uq_study_members_study_id_user_id"),
    )
    op.create_index("ix_study_members_user_id", "study_members", ["user_id"])
    with op.batch_alter_table("annotators") as batch_op:
        batch_op.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("enrolled_from", sa.String(length=64), nullable=True))
        batch_op.create_index("ix_annotators_enrolled_from", ["enrolled_from"])
        batch_op.create_unique_constraint("uq_annotators_invite_nonce", ["invite_nonce"])
    with op.batch_alter_table("assignments") as batch_op:
        for name in ("over_cap", "extra_replica", "after_block", "unverified"):
            batch_op.add_column(
                sa.Column(name, sa.Boolean(), server_default=sa.false(), nullable=False)
            )


def downgrade() -> None:
    with op.batch_alter_table("assignments") as batch_op:
        for name in ("unverified", "after_block", "extra_replica", "over_cap"):
            batch_op.drop_column(name)
    with op.batch_alter_table("annotators") as batch_op:
        batch_op.drop_constraint("uq_annotators_invite_nonce", type_="unique")
        batch_op.drop_index("ix_annotators_enrolled_from")
        batch_op.drop_column("enrolled_from")
        batch_op.drop_column("revoked_at")
    op.drop_index("ix_study_members_user_id", table_name="study_members")
    op.drop_table("study_members")
    with op.batch_alter_table("users") as batch_op:
        batch_op.drop_column("session_epoch")
