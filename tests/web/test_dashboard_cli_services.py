"""The CLI and the dashboard call the same service per verb: they refuse the same
transitions with the same words, and what the CLI does is in the audit log."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from app.auth.service import create_user
from app.cli import cli, load_plugins
from app.db import build_engine, make_sessionmaker
from app.models import AuditEvent, StudyStatus
from tests.hits.factory import make_study

DRAFT_BUILD = "the study is draft: HITs are built once its items are ready"
READY_PLAN = "the study is ready: precompute is planned for draft studies"


@pytest.fixture
def cli_db(migrated_copy, monkeypatch):
    """A committed database for the CLI, with a draft study (items, no HITs) and a ready one."""
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as s, s.begin():
        create_user(s, "bob", "a long password")
        make_study(s, slug="draft", per_cell=12, build=False)
        make_study(s, slug="ready", per_cell=12, build=False).status = StudyStatus.ready
    monkeypatch.setenv("DATABASE_URL", migrated_copy.url)
    monkeypatch.setenv("EBC_ENV", "test")
    yield make_sessionmaker(engine)
    engine.dispose()


def ebc(*args, input: str | None = None):
    load_plugins()  # `ebc precompute` is the worker's
    return CliRunner().invoke(cli, list(args), input=input)


def _dashboard_says(client, session, slug: str, status: StudyStatus, action: str) -> str:
    make_study(session, slug=slug, per_cell=12, build=False).status = status
    session.commit()
    r = client.post(f"/dashboard/studies/{slug}/{action}", data={"csrf_token": client.csrf})
    assert r.status_code == 200
    return r.text


@pytest.mark.sqlite  # the services are tested on both backends; this is about who calls them
def test_the_cli_and_the_dashboard_refuse_the_same_transitions(cli_db, logged_in, session):
    out = ebc("hits", "build", "draft")
    assert out.exit_code == 1 and DRAFT_BUILD in out.output, out.output
    assert DRAFT_BUILD in _dashboard_says(logged_in, session, "d2", StudyStatus.draft, "hits")

    out = ebc("precompute", "ready")
    assert out.exit_code == 1 and READY_PLAN in out.output, out.output
    assert READY_PLAN in _dashboard_says(logged_in, session, "r2", StudyStatus.ready, "precompute")
    with cli_db() as s:
        assert s.scalars(select(AuditEvent.action)).all() == []  # refusals change nothing


@pytest.mark.sqlite
def test_cli_actions_are_in_the_audit_log(cli_db):
    assert ebc("admin", "create-user", "carol", "--password", "another long one").exit_code == 0
    assert ebc("admin", "set-password", "bob", "--password", "-", input="a new password\n")
    secret = ebc("admin", "create-token", "bob", "--name", "ci").output.strip()
    assert ebc("admin", "revoke-token", secret[:12]).exit_code == 0
    out = ebc("hits", "build", "ready")
    assert out.exit_code == 0, out.output
    with cli_db() as s:
        events = s.scalars(select(AuditEvent).order_by(AuditEvent.id)).all()
    assert [(e.action, e.user_id, e.detail["by"]) for e in events] == [
        ("user_created", None, "cli"),
        ("password_reset", None, "cli"),
        ("token_created", None, "cli"),
        ("token_revoked", None, "cli"),
        ("hits_built", None, "cli"),
    ]
    assert events[0].detail["username"] == "carol" and events[1].detail["username"] == "bob"
    assert events[2].detail["username"] == "bob" and events[2].detail["prefix"] == secret[:12]
    assert events[4].study_id is not None and events[4].detail["hits"] > 0
