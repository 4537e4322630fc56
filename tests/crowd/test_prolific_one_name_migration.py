"""Revision 0009 on SQLite and PostgreSQL: Prolific's one name. Annotators of the channel
`panel`, the study settings `channels.panel` and the audit action `crowd_panel_study_set`
become `prolific`, `channels.prolific` and `crowd_prolific_study_set`; other channels,
settings and actions are left alone; the downgrade gives the former names back."""

from __future__ import annotations

import json

from sqlalchemy import text

from app.audit.service import record
from app.db import build_engine, make_sessionmaker, unit_of_work
from app.migrate import downgrade, upgrade
from app.models import Channel
from tests.hits.factory import annotator, make_study


def _state(conn) -> tuple[dict, dict, list]:
    channels = {
        slug: json.loads(c) if isinstance(c, str) else c
        for slug, c in conn.execute(text("SELECT slug, channels FROM studies")).all()
    }
    people = dict(conn.execute(text("SELECT external_id, channel FROM annotators")).all())
    actions = sorted(conn.execute(text("SELECT action FROM audit_events")).scalars())
    return channels, people, actions


def test_revision_0009_gives_prolific_one_name_and_back(empty_db):
    engine = build_engine(empty_db.settings())
    prolific = {"enabled": True, "completion_code": "C0DE", "study_id": "a" * 24}
    try:
        with engine.begin() as conn:
            upgrade(conn)
        with unit_of_work(make_sessionmaker(engine)) as session:
            study = make_study(session, slug="s1", lengths=(10,), per_cell=10)
            study.channels = {**study.channels, "prolific": prolific}
            plain = make_study(session, slug="s2", lengths=(10,), per_cell=10)
            plain.channels = {"mturk": {"enabled": True}}
            annotator(session, study, "p", channel=Channel.prolific, external_id="P1")
            annotator(session, study, "m", channel=Channel.mturk, external_id="M1")
            record(session, "crowd_prolific_study_set", study=study, study_id="a" * 24)
            record(session, "crowd_published", study=study)
        with engine.begin() as conn:
            downgrade(conn, "0008")
            channels, people, actions = _state(conn)
            assert channels["s1"]["panel"] == prolific and "prolific" not in channels["s1"]
            assert channels["s2"] == {"mturk": {"enabled": True}}
            assert people == {"P1": "panel", "M1": "mturk"}
            assert actions == ["crowd_panel_study_set", "crowd_published"]
        with engine.begin() as conn:
            upgrade(conn)
            channels, people, actions = _state(conn)
            assert channels["s1"]["prolific"] == prolific and "panel" not in channels["s1"]
            assert channels["s2"] == {"mturk": {"enabled": True}}
            assert people == {"P1": "prolific", "M1": "mturk"}
            assert actions == ["crowd_prolific_study_set", "crowd_published"]
    finally:
        engine.dispose()
