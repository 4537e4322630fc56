"""hits: replica-slot counters (leased, submitted, next lease expiry) and the claim index

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("hits") as batch_op:
        batch_op.add_column(
            sa.Column("leased_count", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.add_column(
            sa.Column("submitted_count", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.add_column(sa.Column("next_expiry", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index("ix_hits_claim", ["study_id", "submitted_count", "index"])
    # Counters for HITs that already have assignments.
    op.execute(
        """
        UPDATE hits SET
            leased_count = (SELECT count(*) FROM assignments
                            WHERE assignments.hit_id = hits.id AND status = 'leased'),
            submitted_count = (SELECT count(*) FROM assignments
                               WHERE assignments.hit_id = hits.id AND status = 'submitted'),
            next_expiry = (SELECT min(expires_at) FROM assignments
                           WHERE assignments.hit_id = hits.id AND status = 'leased')
        WHERE EXISTS (SELECT 1 FROM assignments WHERE assignments.hit_id = hits.id)
        """
    )


def downgrade() -> None:
    with op.batch_alter_table("hits") as batch_op:
        batch_op.drop_index("ix_hits_claim")
        batch_op.drop_column("next_expiry")
        batch_op.drop_column("submitted_count")
        batch_op.drop_column("leased_count")
