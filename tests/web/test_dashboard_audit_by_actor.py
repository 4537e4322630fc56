"""Who did it, in the audit log: the CLI's actions as "cli", the dashboard's as the user; and
the CLI and the dashboard refuse the same transitions with the same words (one service)."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from app.cli import cli, load_plugins
from app.db import build_engine, make_sessionmaker
from app.models import Annotator, AuditEvent, Channel, StudyStatus
from app.precompute.service import plan_job
from tests.hits.factory import annotator, make_study

STUDY_FILE = """
slug = "from-cli"
title = "Made at the command line"
prefix_lengths = [10]
items_per_cell = 5
[model]
name = "gpt2"
[dataset]
path = "wiki.txt"
"""
CLOSED_BUILD = "the study is closed: HITs are built once its items are ready"
CROWD_LINK = "Only invited annotators have links; a crowd worker is blocked instead."


@pytest.fixture
def cli_db(migrated_copy, monkeypatch):
    """A committed database for the CLI: a ready study (items, no HITs) with a crowd worker,
    and a closed one."""
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as s, s.begin():
        ready = make_study(s, slug="ready", per_cell=12, build=False)
        ready.status = StudyStatus.ready
        annotator(s, ready, "crowd", channel=Channel.prolific, external_id="P1")
        make_study(s, slug="closed", per_cell=12, build=False).status = StudyStatus.closed
    monkeypatch.setenv("DATABASE_URL", migrated_copy.url)
    monkeypatch.setenv("EBC_ENV", "test")
    yield make_sessionmaker(engine)
    engine.dispose()


def ebc(*args):
    load_plugins()
    return CliRunner().invoke(cli, list(args))


def _events(sessionmaker) -> list[AuditEvent]:
    with sessionmaker() as s:
        return list(s.scalars(select(AuditEvent).order_by(AuditEvent.id)))


def test_what_the_cli_does_is_in_the_audit_log_by_cli(cli_db, tmp_path):
    path = tmp_path / "study.toml"
    path.write_text(STUDY_FILE, encoding="utf-8")
    assert ebc("study", "create", "--config", str(path)).exit_code == 0
    assert ebc("hits", "build", "ready").exit_code == 0
    out = ebc("annotators", "invite", "ready", "--count", "2", "--label", "lab")
    assert out.exit_code == 0, out.output
    with cli_db() as s:
        lab = s.scalar(select(Annotator.id).where(Annotator.label == "lab 1"))
    assert ebc("annotators", "revoke", "ready", "lab 1").exit_code == 0
    assert ebc("annotators", "reissue", "ready", str(lab)).exit_code == 0
    events = _events(cli_db)
    assert [e.action for e in events] == [
        "study_created",
        "hits_built",
        "annotators_invited",
        "invite_revoked",
        "invite_reissued",
    ]
    assert all(e.user_id is None and e.detail["by"] == "cli" for e in events)
    assert events[0].detail["source"] == "file" and events[2].detail["count"] == 2
    assert events[3].detail["annotator"] == events[4].detail["annotator"] == "lab 1"
    assert len({e.study_id for e in events[1:]}) == 1 and events[0].study_id != events[1].study_id


def test_what_the_dashboard_does_is_in_the_audit_log_by_the_user(logged_in, session, admin):
    study = make_study(session, slug="s1", lengths=(10,), per_cell=10)
    lab = annotator(session, study, "lab")
    planned = make_study(session, slug="s2", lengths=(10,), per_cell=10, build=False)
    plan_job(session, planned)
    session.commit()
    url = "/dashboard/studies/s1"
    for path, data in (
        ("/annotators/invite", {"count": "1"}),
        (f"/annotators/{lab.id}/revoke", {}),
        (f"/annotators/{lab.id}/reissue", {}),
        (f"/annotators/{lab.id}/block", {"reason": "fast"}),
        (f"/annotators/{lab.id}/unblock", {}),
        (f"/annotators/{lab.id}/cap", {"cap": "2"}),
        ("/cap", {"cap": "7"}),
        ("/close", {}),
        ("/reopen", {}),
    ):
        r = logged_in.post(url + path, data={"csrf_token": logged_in.csrf, **data})
        assert r.status_code == 200 and 'class="error" role="alert"' not in r.text, path
    assert logged_in.get(f"{url}/annotators/links.csv").status_code == 200
    csrf = {"csrf_token": logged_in.csrf}
    assert "cancelled" in logged_in.post("/dashboard/studies/s2/precompute/cancel", data=csrf).text
    session.expire_all()
    events = session.scalars(
        select(AuditEvent).where(AuditEvent.action != "login").order_by(AuditEvent.id)
    ).all()
    assert [e.action for e in events] == [
        "annotators_invited",
        "invite_revoked",
        "invite_reissued",
        "annotator_blocked",
        "annotator_unblocked",
        "annotator_cap_changed",
        "study_cap_changed",
        "study_closed",
        "study_reopened",
        "export",
        "precompute_cancelled",
    ]
    assert all(e.user_id == admin.id and "by" not in e.detail for e in events)
    assert [e.study_id for e in events] == [study.id] * 10 + [planned.id]


def test_the_cli_and_the_dashboard_refuse_alike(cli_db, logged_in, session):
    out = ebc("hits", "build", "closed")
    assert out.exit_code == 1 and CLOSED_BUILD in out.output, out.output
    out = ebc("annotators", "revoke", "ready", "crowd")
    assert out.exit_code == 1 and CROWD_LINK in out.output, out.output
    out = ebc("annotators", "reissue", "ready", "crowd")
    assert out.exit_code == 1 and CROWD_LINK in out.output, out.output
    assert _events(cli_db) == []  # refusals change nothing

    make_study(session, slug="c2", per_cell=12, build=False).status = StudyStatus.closed
    study = make_study(session, slug="r2", per_cell=12)
    crowd = annotator(session, study, "crowd", channel=Channel.prolific, external_id="P1")
    session.commit()
    csrf = {"csrf_token": logged_in.csrf}
    assert CLOSED_BUILD in logged_in.post("/dashboard/studies/c2/hits", data=csrf).text
    for verb in ("revoke", "reissue"):
        r = logged_in.post(f"/dashboard/studies/r2/annotators/{crowd.id}/{verb}", data=csrf)
        assert CROWD_LINK in r.text
    session.expire_all()
    actions = session.scalars(select(AuditEvent.action)).all()
    assert set(actions) <= {"login"}
