"""`ebc results score STUDY` (the EB-M results job) and `ebc results ebm STUDY`, in-process,
on a committed database."""

from __future__ import annotations

import csv
import io
import json

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from app.cli import cli
from app.db import build_engine, make_sessionmaker
from app.models import StudyScore
from tests.factories import StudyFactory
from tests.results.ebm_study import make_ebm_study, write_corpus

# The CLI calls the service tested on both backends (tests/studytypes/ratings/test_ebm.py).
pytestmark = pytest.mark.sqlite


@pytest.fixture
def db(migrated_copy, monkeypatch, tmp_path):
    engine = build_engine(migrated_copy.settings())
    corpus = write_corpus(tmp_path / "corpus.txt")
    with make_sessionmaker(engine)() as session, session.begin():
        make_ebm_study(session, corpus)
        StudyFactory(session, "nw")
    monkeypatch.setenv("DATABASE_URL", migrated_copy.url)
    monkeypatch.setenv("EBC_ENV", "test")
    yield engine, corpus
    engine.dispose()


def run(*args):
    return CliRunner().invoke(cli, ["results", *args])


def _stored(engine) -> int:
    with make_sessionmaker(engine)() as session:
        return session.scalar(select(func.count()).select_from(StudyScore))


def test_score_computes_stores_and_prints(db):
    engine, _ = db
    out = run("ebm", "ebm")
    assert out.exit_code == 0 and "no EB-M scores yet" in out.output
    out = run("score", "ebm", "--b", "200", "--seed", "4")
    assert out.exit_code == 0, out.output
    assert "B=200, seed=4" in out.output and "EB-M" in out.output and "EB-bleu" in out.output
    assert "METEOR matching: exact + Porter stem" in out.output
    assert _stored(engine) == 1
    shown = run("ebm", "ebm", "--format", "json")
    doc = json.loads(shown.output)
    assert doc["scores"]["b"] == 200 and doc["scores"]["seed"] == 4
    rows = list(csv.DictReader(io.StringIO(run("ebm", "ebm", "-f", "csv").output)))
    assert {r["figure"] for r in rows} == {"score", "ebm", "eb_bleu"}
    assert "\\begin{tabular}" in run("ebm", "ebm", "-f", "latex").output


def test_score_refuses_with_a_message_and_stores_nothing(db):
    engine, corpus = db
    out = run("score", "nw")
    assert out.exit_code == 1 and "next-word study" in out.output
    out = run("ebm", "nw")
    assert out.exit_code == 1 and "next-word study" in out.output
    out = run("score", "ebm", "--format", "xml")
    assert out.exit_code == 1 and "unknown format" in out.output
    out = run("score", "nope")
    assert out.exit_code == 1 and "no study 'nope'" in out.output
    corpus.unlink()
    out = run("score", "ebm")
    assert out.exit_code == 1 and "is not here" in out.output
    assert _stored(engine) == 0
