"""one name per crowd platform: Prolific's channel is `prolific`, no longer `panel`

Data only (issue 31): a platform's name is its channel's, its study file section's and its
postings' (`crowd_postings.provider` already said `prolific`). So annotators who came
through Prolific get the channel `prolific` (a string column with no CHECK), the study
settings `channels.panel` become `channels.prolific`, and the audit action of pinning a
study's Prolific id is named `crowd_prolific_study_set`. Entry URLs do not change
(`/p/{slug}` and its key), so links participants hold keep working. Reversible.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Tables as this revision knows them (never the models: they move on).
_studies = sa.table("studies", sa.column("id", sa.Integer), sa.column("channels", sa.JSON))
_annotators = sa.table("annotators", sa.column("channel", sa.String))
_audit = sa.table("audit_events", sa.column("action", sa.String))
# (former name, new name) of the channel, and of the audit action.
_CHANNEL = ("panel", "prolific")
_ACTION = ("crowd_panel_study_set", "crowd_prolific_study_set")


def _rename(old: str, new: str, old_action: str, new_action: str) -> None:
    bind = op.get_bind()
    bind.execute(_annotators.update().where(_annotators.c.channel == old).values(channel=new))
    bind.execute(_audit.update().where(_audit.c.action == old_action).values(action=new_action))
    for study_id, channels in bind.execute(sa.select(_studies.c.id, _studies.c.channels)).all():
        if not channels or old not in channels:
            continue
        renamed = {new if key == old else key: value for key, value in channels.items()}
        bind.execute(_studies.update().where(_studies.c.id == study_id).values(channels=renamed))


def upgrade() -> None:
    _rename(*_CHANNEL, *_ACTION)


def downgrade() -> None:
    _rename(*reversed(_CHANNEL), *reversed(_ACTION))
