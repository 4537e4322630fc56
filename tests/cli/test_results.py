"""`ebc results STUDY` in every format (in-process, on a committed SQLite database)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.db import build_engine, make_sessionmaker
from tests.factories import StudyFactory, make_handmade

# The CLI reads the same service on both backends; SQLite is enough.
pytestmark = pytest.mark.sqlite


@pytest.fixture
def db(migrated_copy, monkeypatch):
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as session, session.begin():
        make_handmade(session)
    engine.dispose()
    monkeypatch.setenv("DATABASE_URL", migrated_copy.url)
    monkeypatch.setenv("EBC_ENV", "test")
    return migrated_copy


def run(*args):
    return CliRunner().invoke(cli, ["results", *args])


def test_results_in_every_format(db):
    out = run("hand", "--b", "200")
    assert out.exit_code == 0, out.output
    assert "with exclusions" in out.output and "1.667" in out.output
    out = run("hand", "--b", "200", "--format", "json", "--exclusions", "off")
    data = json.loads(out.output)
    assert data["results"]["table"][0]["ebc"]["estimate"] == pytest.approx(1.2)
    out = run("hand", "--b", "200", "--format", "csv", "--estimator", "plurality")
    rows = list(csv.DictReader(io.StringIO(out.output)))
    assert {r["estimator"] for r in rows} == {"plurality"}
    out = run("hand", "--b", "200", "--format", "latex", "--unit", "hit")
    assert "\\begin{tabular}{llccc}" in out.output and "resampling unit: hit" in out.output


def test_results_errors(db):
    out = run("nope")
    assert out.exit_code == 1 and "no study 'nope'" in out.output
    out = run("hand", "--unit", "worker")
    assert out.exit_code == 1 and "unit" in out.output
    out = run("hand", "--format", "xml")
    assert out.exit_code == 1 and "unknown format" in out.output


def test_a_nan_figure_is_null_in_the_json_output(migrated_copy, monkeypatch):
    """One annotator: the CGD's interval and every test are undefined (NaN), written null."""
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as session, session.begin():
        f = StudyFactory(session, "solo")
        items = [f.item("data") for _ in range(2)] + [f.item("model") for _ in range(2)]
        f.answer(f.annotator("only"), f.hit(items), [0, 1, None, 0])
    engine.dispose()
    monkeypatch.setenv("DATABASE_URL", migrated_copy.url)
    monkeypatch.setenv("EBC_ENV", "test")
    out = run("solo", "--b", "200", "--format", "json")
    assert out.exit_code == 0, out.output
    assert "NaN" not in out.output and "Infinity" not in out.output
    cgd = json.loads(out.output)["results"]["cgd"][0]
    assert cgd["estimate"] == 0.5 and cgd["se"] is None and cgd["p_value"] is None


def test_plan_prints_each_channel_s_price_by_its_own_fee_rule(db):
    engine = build_engine(db.settings())
    with make_sessionmaker(engine)() as session, session.begin():
        from app.studies.service import get_study

        get_study(session, "hand").reward_cents = 37
    engine.dispose()
    out = run("plan", "hand", "--target-ebc", "1.05", "--format", "json")
    assert out.exit_code == 0, out.output
    plan = json.loads(out.output)
    assignments = plan["assignments"]
    fees = {c["channel"]: c["fees_cents"] for c in plan["channel_costs"]}
    # MTurk 20% of 37 cents = 7 a assignment; Prolific 42.8% of all rewards; links none.
    assert fees == {
        "mturk": 7 * assignments,
        "prolific": int(37 * assignments * 0.428 + 0.5),
        "local": 0,
    }
    out = run("plan", "hand", "--target-ebc", "1.05")
    assert out.exit_code == 0, out.output
    text = out.output
    assert f"assignments {assignments:,}" in text and "cost per channel" in text
    mturk = next(line for line in text.splitlines() if line.startswith("  mturk"))
    dollars = [f"${cents / 100:,.2f}" for cents in (37 * assignments, 7 * assignments)]
    assert f"rewards {dollars[0]} + fees {dollars[1]} = ${44 * assignments / 100:,.2f}" in mturk
    assert "fee rule: none" in text  # the invite links'
    assert text.count("fee rule:") == 3


def test_plan_refuses_what_it_cannot_plan(db):
    out = run("plan", "hand", "--target-ebc", "0.5")
    assert out.exit_code == 1 and "--target-ebc must be in (1, 3]" in out.output
    out = run("plan", "hand", "--power", "1")
    assert out.exit_code == 1 and "--power must be in (0.05, 1)" in out.output
    out = run("plan", "hand", "--format", "xml")
    assert out.exit_code == 1 and "unknown format" in out.output
    out = run("plan", "nope")
    assert out.exit_code == 1 and "no study 'nope'" in out.output
    out = run("plan", "hand", "--target-ebc", "3", "--power", "0.99", "--alpha", "1e-9")
    assert out.exit_code in (0, 1)  # a reachable plan, or the planner's reason in words
    if out.exit_code == 1:
        assert "no study reaches this target" in out.output
