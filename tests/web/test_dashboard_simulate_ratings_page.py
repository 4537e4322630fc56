"""The study page's "Simulate before you pay" for a ratings study (app.web.dashboard_simulate
with app.studytypes.ratings.preview): the raters' form, the figures, the bounds, bad input."""

from __future__ import annotations

import dataclasses
import html
from contextlib import ExitStack
from urllib.parse import urlencode

import pytest

from app.simulate.costs import channel_costs
from app.simulate.preview import PAGE_LIMITS
from app.studytypes.ratings.preview import RatingsPreviewOptions, simulate_ratings_before_paying
from app.web import dashboard_simulate
from app.web.dashboard_simulate import BUSY, MAX_RUNNING, RUNNING
from tests.hits.ratings_factory import make_ratings_study
from tests.web.test_dashboard_simulate_page import _snapshot

URL = "/dashboard/studies/rsim/simulate"


def _study(session):
    """A ratings study of two lengths, made 100 pairs per cell for the simulation: 20 HITs
    per length, 5 ratings a pair, 200 assignments at 45 cents."""
    study = make_ratings_study(session, slug="rsim", lengths=(10, 20), per_cell=10, replicas=5)
    study.items_per_cell = 100
    study.reward_cents = 45
    session.commit()
    return study


def test_a_ratings_study_page_shows_the_raters_form(logged_in, session):
    _study(session)
    r = logged_in.get("/dashboard/studies/rsim")
    assert r.status_code == 200 and r.template.name == "study.html"
    values = r.context["sim_values"]
    assert values["quality"] == "3.4,3.1" and values["consistency"] == "3.3,2.9"
    assert "target_ebc" not in values and values["replications"] == "20"
    assert f'action="{URL}"' in r.text and 'name="quality"' in r.text
    assert 'name="target_ebc"' not in r.text and "True mean consistency (data, model)" in r.text


def test_the_simulation_renders_the_raters_figures_and_costs(logged_in, session, settings):
    study = _study(session)
    query = {
        "quality": "3.5,3.0",
        "consistency": "3.2,3.2",
        "crowd": "spammers:0.1",
        "sd_pair": "0.5",
        "half_width": "0.15",
        "replications": "4",
        "seed": "2",
    }
    before = _snapshot(session)
    r = logged_in.get(f"{URL}?{urlencode(query)}")
    assert r.status_code == 200, r.text[:500]
    assert r.template.name == "simulate.html" and r.context["sim_errors"] == {}
    sim = r.context["sim"]
    options = RatingsPreviewOptions(
        quality=(3.5, 3.0),
        consistency=(3.2, 3.2),
        crowd="spammers:0.1",
        sd_pair=0.5,
        half_width=0.15,
        replications=4,
        seed=2,
    )
    again = simulate_ratings_before_paying(
        study, settings, options, limits=PAGE_LIMITS, price=channel_costs
    )
    assert sim.rows == again.rows and sim.needs == again.needs and sim.costs == again.costs
    assert sim.options.b == PAGE_LIMITS.b and sim.raters.hetero.sd_pair == 0.5
    page = html.unescape(r.text)
    assert (
        "Simulation" in page and "not data" in page and "attentive raters with spammers:0.1" in page
    )
    for row in sim.rows:
        assert f"{row.first_gap:.4f} [{row.first_low:.4f}, {row.first_high:.4f}]" in page
        assert f"{row.gap_coverage:.3f} ± {row.gap_coverage_mc:.3f}" in page
        assert f"{row.reject:.3f} ± {row.reject_mc:.3f}" in page
        assert row.true_gap == pytest.approx(0.5 if row.step == "quality" else 0.0)
    assert "(size: the true gap is 0)" in page  # consistency: the same means
    for n in sim.needs:
        assert f"{n.pairs_for_half_width:,} for a half-width of 0.15" in page
    assert "no power figure" in page  # consistency's true gap is 0
    # 2 lengths x 20 HITs x 5 ratings = 200 assignments at 45 cents: MTurk's 20% (9 cents).
    costs = {c.provider: c for c in sim.costs}
    assert costs["mturk"].estimate.total_cents == 200 * 54
    assert "$108.00" in page and "$90.00" in page  # MTurk's total, the rewards
    assert "one HIT each, paid per HIT" in page and "2,200" in page  # ratings
    for line in sim.assumptions:
        assert line in page
    assert _snapshot(session) == before  # running it changed nothing


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"quality": "3.4"}, "quality", "two numbers"),
        ({"quality": "6,3"}, "quality", "strictly between 0 and 5"),
        ({"consistency": "inf,2"}, "consistency", "finite number"),
        ({"sd_noise": "0"}, "sd_noise", "greater than 0"),
        ({"half_width": "-1"}, "half_width", "greater than 0"),
        ({"replications": "51"}, "replications", "at most 50 here"),
        ({"crowd": "oracle"}, "crowd", "do not apply to raters"),
        ({"crowd": "<script>alert(1)</script>"}, "crowd", "unknown crowd behaviour"),
        ({"quality": "<b>3</b>,2"}, "quality", "valid number"),
    ],
)
def test_bad_input_re_renders_the_form_with_a_400(logged_in, session, query, field, message):
    _study(session)
    before = _snapshot(session)
    r = logged_in.get(f"{URL}?{urlencode(query)}")
    assert r.status_code == 400 and r.template.name == "simulate.html"
    assert r.context["sim"] is None and message in r.context["sim_errors"][field]
    assert r.context["sim_errors"][field] in html.unescape(r.text)
    assert "<script>" not in r.text and "<b>3</b>" not in r.text  # escaped, never markup
    assert 'aria-invalid="true"' in r.text
    assert _snapshot(session) == before


def test_the_page_s_bounds_hold_for_ratings(logged_in, session, monkeypatch):
    """A design too big for the page is refused before any work; past the time budget the
    page says what was done; with every slot taken, a 429."""
    study = _study(session)
    study.items_per_cell = 2000
    study.prefix_lengths = list(range(5, 55, 5))
    study.per_annotator_cap = 1
    session.commit()
    r = logged_in.get(f"{URL}?replications=1")
    assert (
        r.status_code == 400
        and "too much to simulate here" in r.context["sim_errors"]["replications"]
    )
    study.items_per_cell, study.prefix_lengths, study.per_annotator_cap = 100, [10, 20], 200
    session.commit()
    cut = dataclasses.replace(dashboard_simulate.PAGE_LIMITS, seconds=0.0)
    monkeypatch.setattr(dashboard_simulate, "PAGE_LIMITS", cut)
    r = logged_in.get(f"{URL}?replications=4&seed=1")
    assert r.status_code == 200 and r.context["sim"].summary.replications == 1
    assert "Stopped after 1 of the 4 replications asked" in html.unescape(r.text)
    with ExitStack() as running:
        assert all(running.enter_context(RUNNING.take()) for _ in range(MAX_RUNNING))
        r = logged_in.get(f"{URL}?replications=2")
        assert r.status_code == 429 and r.headers["Retry-After"] == "5"
        assert r.context["sim_errors"] == {"form": BUSY} and r.context["sim"] is None


def test_the_ratings_simulation_ends_with_a_sentence_verdict(logged_in, session):
    """A small design (100 pairs per cell) asked for a narrow gap interval is too small, and
    the sentence says how much would be enough, priced; a wide target with a large gap is
    enough."""
    _study(session)
    query = {"quality": "3.5,3.0", "half_width": "0.02", "replications": "4"}
    r = logged_in.get(f"{URL}?{urlencode(query)}")
    assert r.status_code == 200, r.text[:500]
    sim = r.context["sim"]
    said = html.unescape(r.text.split('id="simulate-verdict" role="status"><strong>')[1])
    said = said.split("</strong>")[0]
    assert said == sim.verdict and not sim.enough
    assert said.startswith("Too small: ") and "at worst (0.02 asked)" in said
    assert "enough would be about" in said and "items_per_cell = " in said
    assert " raters" in said and " on mturk" in said  # the grown design, priced
    needed = max(n.pairs_for_half_width for n in sim.needs)
    assert f"{needed:,} pairs per cell" in said
    items = int(said.split("items_per_cell = ")[1].split(" ")[0].replace(",", ""))
    assert items >= needed  # the grown design holds what the half-width needs
    query = {"quality": "3.9,2.0", "consistency": "3.9,2.0", "half_width": "5",
             "sd_rater_kind": "0", "sd_pair": "0", "replications": "4"}  # fmt: skip
    wide = logged_in.get(f"{URL}?{urlencode(query)}").context["sim"]
    # Enough, or too small only for want of effective raters (a small study's crowd).
    assert wide.enough or "effective raters" in wide.verdict.split(";")[0]
    assert "half-width is" in wide.verdict and "(5 asked)" in wide.verdict
