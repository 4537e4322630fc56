"""`ebc crowd publish --provider local --invites N`: a count the invitation service would
refuse is refused before anything is published (no posting, no links)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from app.annotation.admin import MAX_BATCH
from app.cli import cli
from app.db import build_engine, make_sessionmaker
from app.models import Annotator, CrowdPosting
from tests.crowd.platforms.local.test_provider import SLUG, lab_study


@pytest.fixture
def cli_db(migrated_copy, monkeypatch):
    """A committed database with a lab study open to annotators: the CLI owns its
    transactions."""
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as s, s.begin():
        lab_study(s)
    monkeypatch.setenv("DATABASE_URL", migrated_copy.url)
    monkeypatch.setenv("EBC_ENV", "test")
    monkeypatch.setenv("EBC_BASE_URL", "https://ebc.example.org")
    yield make_sessionmaker(engine)
    engine.dispose()


def test_a_bad_invite_count_is_refused_before_publishing(cli_db):
    for bad in ("-1", str(MAX_BATCH + 1)):
        args = ["crowd", "publish", SLUG, "--provider", "local", "--yes", "--invites", bad]
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 2, out.output  # a usage error, as typer reports one
        assert "--invites" in out.output and "published" not in out.output
    with cli_db() as s:
        assert s.scalar(select(func.count()).select_from(CrowdPosting)) == 0
        assert s.scalar(select(func.count()).select_from(Annotator)) == 0

    out = CliRunner().invoke(
        cli, ["crowd", "publish", SLUG, "--provider", "local", "--yes", "--invites", "0"]
    )
    assert out.exit_code == 0 and "published 4 now" in out.output, out.output


def test_the_provider_follows_the_study_as_its_crowd_page_opens(cli_db, monkeypatch):
    from app.crowd.registry import page_default
    from app.models import Study

    monkeypatch.delenv("EBC_PROLIFIC_API_TOKEN", raising=False)
    # A study that enables no crowd channel: the invite links (local).
    out = CliRunner().invoke(cli, ["crowd", "publish", SLUG, "--yes"])
    assert out.exit_code == 0 and "provider: local (the study's first channel" in out.output
    assert "published 4 now; 4 on local" in out.output, out.output

    # MTurk and Prolific enabled: Prolific, as the Crowd page opens; --provider still wins.
    with cli_db() as s, s.begin():
        study = s.scalar(select(Study).where(Study.slug == SLUG))
        both = {"enabled": True, "completion_code": "C0DE"}
        study.channels = {**study.channels, "prolific": both, "mturk": {"enabled": True}}
    with cli_db() as s:
        assert page_default(s.scalar(select(Study).where(Study.slug == SLUG))).name == "prolific"
    out = CliRunner().invoke(cli, ["crowd", "sync", SLUG])
    assert out.exit_code == 1 and "provider: prolific" in out.output
    assert "EBC_PROLIFIC_API_TOKEN" in out.output  # this server has no Prolific token
    out = CliRunner().invoke(cli, ["crowd", "sync", SLUG, "--provider", "local"])
    assert out.exit_code == 0 and "provider:" not in out.output, out.output

    # No study to follow: the provider must be named; an unknown study is refused.
    out = CliRunner().invoke(cli, ["crowd", "balance"])
    assert out.exit_code == 1 and "give a study" in out.output
    out = CliRunner().invoke(cli, ["crowd", "sync", "no-such-study"])
    assert out.exit_code == 1 and "provider:" not in out.output
