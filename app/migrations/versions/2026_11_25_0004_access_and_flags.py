"""access and flags: session epochs, study members, opaque invite nonces, kept-but-flagged work

Data: crowd channels became opt-in (`channels.panel.enabled`, `channels.mturk.enabled`,
default off); a study that already has panel or MTurk annotators keeps that channel on.
A panel redirect that is not an http(s) URL is dropped. MTurk work counts once its
assignment is confirmed through the MTurk API: existing MTurk assignments not approved
through it are flagged `unverified`.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 10:00:00
"""

import copy
import re
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
            ["study_id"],
            ["studies.id"],
            name="fk_study_members_study_id_studies",
            ondelete="CASCADE",
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
    # A unique index, not a constraint: on SQLite a constraint makes batch mode recreate the
    # table, and dropping the old `annotators` with foreign keys on deletes every assignment
    # (ON DELETE CASCADE) and so every judgment. The index is the same guarantee, in place.
    op.create_index("ix_annotators_invite_nonce", "annotators", ["invite_nonce"], unique=True)
    # Plain ALTER TABLE ... ADD COLUMN, not batch mode: on SQLite a SQL-expression server
    # default makes batch mode copy `assignments`, and dropping the old table with foreign
    # keys on deletes every judgment (ON DELETE CASCADE). A constant default needs no copy.
    for name in ("over_cap", "extra_replica", "after_block", "unverified"):
        op.add_column(
            "assignments", sa.Column(name, sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    _channels_opt_in()


# Tables as this revision knows them (never the models: they move on).
_studies = sa.table("studies", sa.column("id", sa.Integer), sa.column("channels", sa.JSON))
_annotators = sa.table(
    "annotators",
    sa.column("id", sa.Integer),
    sa.column("study_id", sa.Integer),
    sa.column("channel", sa.String),
)
_assignments = sa.table(
    "assignments",
    sa.column("annotator_id", sa.Integer),
    sa.column("review_status", sa.String),
    sa.column("unverified", sa.Boolean),
)
_CROWD = ("panel", "mturk")
_HTTP = re.compile(r"https?://[^\s/?#]+\S*", re.IGNORECASE)


def _channels_opt_in() -> None:
    bind = op.get_bind()
    in_use = set(
        bind.execute(
            sa.select(_annotators.c.study_id, _annotators.c.channel)
            .where(_annotators.c.channel.in_(_CROWD))
            .distinct()
        ).all()
    )
    for study_id, channels in bind.execute(sa.select(_studies.c.id, _studies.c.channels)).all():
        new = copy.deepcopy(channels or {})
        for name in _CROWD:
            section = new.setdefault(name, {})
            section["enabled"] = (study_id, name) in in_use
        redirect = new["panel"].get("redirect_url")
        if redirect is not None and not _HTTP.fullmatch(str(redirect)):
            new["panel"]["redirect_url"] = None
        bind.execute(_studies.update().where(_studies.c.id == study_id).values(channels=new))
    mturk = sa.select(_annotators.c.id).where(_annotators.c.channel == "mturk")
    bind.execute(
        _assignments.update()
        .where(
            _assignments.c.annotator_id.in_(mturk),
            sa.or_(
                _assignments.c.review_status.is_(None),
                _assignments.c.review_status != "approved",
            ),
        )
        .values(unverified=True)
    )


def _channels_as_before() -> None:
    """The keys this revision added to the channel settings go (the old schema forbids
    unknown keys)."""
    bind = op.get_bind()
    for study_id, channels in bind.execute(sa.select(_studies.c.id, _studies.c.channels)).all():
        old = copy.deepcopy(channels or {})
        for name in _CROWD:
            for key in ("enabled", "study_id"):
                (old.get(name) or {}).pop(key, None)
        if old != channels:
            bind.execute(_studies.update().where(_studies.c.id == study_id).values(channels=old))


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


_ADDED = {
    "assignments": ("unverified", "after_block", "extra_replica", "over_cap"),
    "annotators": ("enrolled_from", "revoked_at"),
    "users": ("session_epoch",),
}


def downgrade() -> None:
    _channels_as_before()
    if _sqlite():
        # In place (SQLite >= 3.35): a batch-mode copy of these tables would drop the old
        # ones, and with foreign keys on that deletes their children (see upgrade).
        op.drop_index("ix_annotators_invite_nonce", table_name="annotators")
        op.drop_index("ix_annotators_enrolled_from", table_name="annotators")
        op.drop_index("ix_study_members_user_id", table_name="study_members")
        op.drop_table("study_members")
        for table, columns in _ADDED.items():
            for column in columns:
                op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        return
    with op.batch_alter_table("assignments") as batch_op:
        for name in ("unverified", "after_block", "extra_replica", "over_cap"):
            batch_op.drop_column(name)
    op.drop_index("ix_annotators_invite_nonce", table_name="annotators")
    with op.batch_alter_table("annotators") as batch_op:
        batch_op.drop_index("ix_annotators_enrolled_from")
        batch_op.drop_column("enrolled_from")
        batch_op.drop_column("revoked_at")
    op.drop_index("ix_study_members_user_id", table_name="study_members")
    op.drop_table("study_members")
    with op.batch_alter_table("users") as batch_op:
        batch_op.drop_column("session_epoch")
