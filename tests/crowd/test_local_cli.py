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
