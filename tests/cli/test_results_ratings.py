"""`ebc results STUDY` for a ratings study: its Table 3 in the terminal, as CSV, LaTeX and
JSON (in-process, on a committed database)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.db import build_engine, make_sessionmaker
from tests.results.ratings_study import make_rated_study

# The CLI calls the service tested on both backends (tests/studytypes/ratings/test_results.py).
pytestmark = pytest.mark.sqlite


@pytest.fixture
def db(migrated_copy, monkeypatch):
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as session, session.begin():
        made = make_rated_study(session)
    engine.dispose()
    monkeypatch.setenv("DATABASE_URL", migrated_copy.url)
    monkeypatch.setenv("EBC_ENV", "test")
    return made


def run(*args):
    return CliRunner().invoke(cli, ["results", *args])


def test_table_3_in_every_format(db):
    out = run("rated", "--b", "200", "--format", "json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)["ratings"]
    main = doc["results"]
    row = main["table"][1]  # l = 20
    q = row["quality"]
    table = run("rated", "--b", "200")
    assert table.exit_code == 0, table.output
    text = table.output
    assert "rated: with exclusions" in text and "rated: without exclusions" in text
    assert "SIMULATED: includes" in text and "two-way" in text
    line = next(x for x in text.splitlines() if x.split()[:2] == ["20", "quality"])
    data = q["data"]
    assert f"{data['mean']:.2f} [{data['ci_low']:.2f}, {data['ci_high']:.2f}]" in line
    c = q["contrast"]
    assert f"{c['ratio']:.3f} [{c['ratio_low']:.3f}, {c['ratio_high']:.3f}]" in line
    assert "agreement on quality" in text and "within one point" in text
    assert "paper-comparable (mean +- std over 5 runs of 2 pairs)" in text
    rows = list(csv.DictReader(io.StringIO(run("rated", "--b", "200", "-f", "csv").output)))
    assert {r["exclusions"] for r in rows} == {"on", "off"}
    tex = run("rated", "--b", "200", "-f", "latex", "--paper").output
    assert "\\begin{tabular}{llcccccccc}" in tex and "paper-comparable" in tex
    assert "random disjoint runs of pairs, 5 runs of 2 pairs (paper-comparable)" in tex
    off = json.loads(run("rated", "--b", "200", "-f", "json", "--exclusions", "off").output)
    assert off["ratings"]["results"]["n_ratings"] > main["n_ratings"]


def test_next_word_options_and_diagnostics_are_refused(db):
    refused = run("rated", "--b", "200", "--unit", "twoway")
    assert refused.exit_code == 1
    assert "rated is a ratings study: unit is a next-word option" in refused.output
    assert run("rated", "--b", "200", "--estimator", "plurality").exit_code == 1
    diagnostics = run("diagnostics", "rated", "--b", "200")
    assert diagnostics.exit_code == 1
    assert "rated is a ratings study: it has no diagnostics" in diagnostics.output
    doc = json.loads(run("rated", "--b", "200", "-f", "json").output)
    assert set(doc["options"]) == {"b", "seed", "exclusions", "level"}


def test_unfinished_hits_are_a_note(db, migrated_copy):
    from app.annotation.leases import next_assignment
    from app.studytypes.ratings.annotation import CONSISTENCY, QUALITY, RatingPost, rate
    from tests.hits.factory import annotator
    from tests.hits.ratings_factory import make_ratings_study

    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as session, session.begin():
        study = make_ratings_study(session, slug="part", per_cell=10, replicas=1)
        done, late = annotator(session, study, "done"), annotator(session, study, "late")
        lease = next_assignment(session, done, serve=True).assignment
        for position in range(11):
            for step in (QUALITY, CONSISTENCY):
                rate(session, done, RatingPost(lease.public_id, position, step, "3", 4000))
        begun = next_assignment(session, late, serve=True).assignment
        for position, step in ((0, QUALITY), (0, CONSISTENCY), (1, QUALITY)):
            rate(session, late, RatingPost(begun.public_id, position, step, "4", 4000))
    engine.dispose()
    out = run("part", "--b", "200")
    assert out.exit_code == 0, out.output
    assert "note: 2 ratings in 1 unfinished HIT, not counted" in out.output
    assert "exclusions; 10 ratings by 1 annotators" in out.output  # the finished HIT's
