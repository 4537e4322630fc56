"""crowd unit expiry: when a platform stops listing a unit by itself

New nullable column `crowd_hits.expires_at`: MTurk takes a HIT down once the posting's
lifetime has passed since it was made or last reopened, and a published unit past it is
expired. Filled for the published units of existing MTurk postings: the posting's
`lifetime_days` from the later of the unit's publishing and the posting's last finished
reopen. Other units keep NULL (they never lapse).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 19:00:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_postings = sa.table(
    "crowd_postings",
    sa.column("id", sa.Integer),
    sa.column("provider", sa.String),
    sa.column("settings", sa.JSON),
)
_hits = sa.table(
    "crowd_hits",
    sa.column("id", sa.Integer),
    sa.column("posting_id", sa.Integer),
    sa.column("status", sa.String),
    sa.column("published_at", sa.DateTime(timezone=True)),
    sa.column("expires_at", sa.DateTime(timezone=True)),
)
_calls = sa.table(
    "crowd_calls",
    sa.column("posting_id", sa.Integer),
    sa.column("kind", sa.String),
    sa.column("status", sa.String),
    sa.column("finished_at", sa.DateTime(timezone=True)),
)


def _utc(when: datetime | None) -> datetime | None:
    if when is None:
        return None
    return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)


def upgrade() -> None:
    # Plain ALTER TABLE ... ADD COLUMN, not batch mode (see 0006).
    op.add_column("crowd_hits", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    conn = op.get_bind()
    postings = conn.execute(
        sa.select(_postings.c.id, _postings.c.settings).where(_postings.c.provider == "mturk")
    ).all()
    for posting_id, settings in postings:
        days = (settings or {}).get("lifetime_days")
        if days is None:
            continue
        lifetime = timedelta(seconds=max(30, round(float(days) * 86400)))
        reopened = _utc(
            conn.scalar(
                sa.select(sa.func.max(_calls.c.finished_at)).where(
                    _calls.c.posting_id == posting_id,
                    _calls.c.kind == "reopen",
                    _calls.c.status == "ok",
                )
            )
        )
        rows = conn.execute(
            sa.select(_hits.c.id, _hits.c.published_at).where(
                _hits.c.posting_id == posting_id,
                _hits.c.status == "published",
                _hits.c.published_at.is_not(None),
            )
        ).all()
        for hit_id, published_at in rows:
            since = max(t for t in (_utc(published_at), reopened) if t is not None)
            # Stored as the application stores it: naive UTC on SQLite, aware elsewhere.
            until = since + lifetime
            if conn.dialect.name == "sqlite":
                until = until.replace(tzinfo=None)
            conn.execute(sa.update(_hits).where(_hits.c.id == hit_id).values(expires_at=until))


def downgrade() -> None:
    # In place (SQLite >= 3.35 drops a column without copying the table), as in 0006.
    op.execute("ALTER TABLE crowd_hits DROP COLUMN expires_at")
