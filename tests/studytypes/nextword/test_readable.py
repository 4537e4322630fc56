"""Readable at any size (issue 32): the EB-C axis on a log scale, an interval that runs off
the plot clipped with an arrow and its end written out, an uninformative interval said in
words with the planner's answer; on a real study's results with its EB-C at l = 10 set to
the demo's pilot interval [0.682, 5.4·10⁷] (a 10⁷-wide interval)."""

from __future__ import annotations

import base64
import math
import random
import re
from dataclasses import replace

import pytest
from starlette.requests import Request

from app.main import create_app
from app.results.schemas import ResultQuery
from app.results.stats.figure import bound_text
from app.studytypes.nextword.dashboard import results_context
from app.studytypes.nextword.planning import annotators_for_halfwidth
from app.studytypes.nextword.plot import CLIP_FACTOR, ratio_limits, results_plot
from app.studytypes.nextword.readable import UNINFORMATIVE_SPAN, interval_sentence, uninformative
from app.studytypes.nextword.results import study_results
from app.web.dashboard_results import PageQuery
from app.web.templating import templates
from tests.factories import StudyFactory

PILOT = {"estimate": 1.304, "low": 0.682, "high": 53_974_915.931}


def small_study(session, slug: str = "pilot", annotators: int = 5):
    """`annotators` annotators, two HITs of 10 items per length each: a pilot's size."""
    f = StudyFactory(session, slug, lengths=(10, 20))
    rng = random.Random(7)
    for a in range(annotators):
        who = f.annotator(f"ann{a}")
        for length in (10, 20):
            for _ in range(2):
                items = [f.item("data", length) for _ in range(5)]
                items += [f.item("model", length) for _ in range(5)]
                answers = [rng.choice([0, 0, 0, 1, 2, None]) for _ in range(10)]
                f.answer(who, f.hit(items), answers)
    session.commit()
    return f.study


def with_pilot_interval(res, **fields):
    """`res` with the main figures' EB-C at its first length replaced by `fields`."""
    rs = res.results
    row = rs.table[0]
    row = row.model_copy(update={"ebc": replace(row.ebc, **fields)})
    return res.model_copy(update={"results": rs.model_copy(update={"table": [row, *rs.table[1:]]})})


def with_pooled_interval(res, **fields):
    """`res` with the main figures' pooled test of EB-C = 1 (over the lengths) given
    `fields`."""
    rs = res.results
    tests = [replace(t, **fields) if t.length is None else t for t in rs.tests]
    assert any(t.length is None for t in tests)
    return res.model_copy(update={"results": rs.model_copy(update={"tests": tests})})


def every_length_narrow(res):
    rs = res.results
    rows = [r.model_copy(update={"ebc": replace(r.ebc, low=1.0, high=1.04)}) for r in rs.table]
    return res.model_copy(update={"results": rs.model_copy(update={"table": rows})})


@pytest.fixture
def pilot(session):
    study = small_study(session)
    res = study_results(session, study, ResultQuery(b=500))
    return study, with_pilot_interval(res, **PILOT)


def test_bounds_are_written_out_readably():
    assert bound_text(53_974_915.931) == "5.4·10⁷"
    assert bound_text(1.3043) == "1.3"
    assert bound_text(0.682) == "0.682"
    assert bound_text(math.inf) == "∞" and bound_text(None) == "∞"
    assert bound_text(None, high=False) == "0"
    assert bound_text(2.5e-6) == "2.5·10⁻⁶"


def test_the_ratio_axis_stops_within_the_clip_factor_of_the_estimates():
    lo, hi = ratio_limits([(1.304, 0.682, 53_974_915.931), (1.1, 0.9, 1.3)])
    pad = 0.1 * math.log(1.304 * CLIP_FACTOR / 0.682)
    assert hi == pytest.approx(1.304 * CLIP_FACTOR * math.exp(pad))
    assert lo == pytest.approx(0.682 * math.exp(-pad))
    # Narrow intervals: the axis hugs them and the line at 1 (a margin of at least 0.5%).
    lo, hi = ratio_limits([(1.02, 1.01, 1.03)])
    assert lo == pytest.approx(math.exp(-0.005)) and hi == pytest.approx(1.03 * math.exp(0.005))


def test_a_ten_million_wide_interval_is_clipped_with_an_arrow_and_its_bound(pilot):
    _, res = pilot
    svg = results_plot(res, "svg").decode()
    # The clipped end: an arrow (its own group) and the bound written out beside it.
    assert 'id="clipped-high-10"' in svg and 'id="clipped-high-10-text"' in svg
    assert "up to 5.4·10⁷" in svg
    assert "log scale" in svg
    # The low end 0.682 lies on the axis: drawn, not clipped.
    assert 'id="clipped-low-10"' not in svg
    # Without the pilot interval, no arrow for l = 10.
    plain = results_plot(with_pilot_interval(res, high=1.5), "svg").decode()
    assert 'id="clipped-high-10"' not in plain


def test_an_unbounded_end_is_clipped_and_written_as_infinity(pilot):
    _, res = pilot
    svg = results_plot(with_pilot_interval(res, high=math.inf, low=0.0), "svg").decode()
    assert "up to ∞" in svg and "down to 0" in svg
    assert 'id="clipped-low-10"' in svg


def test_the_sentence_names_the_effective_annotators_the_bounds_and_the_planner(session, pilot):
    study, res = pilot
    res = with_pooled_interval(res, low=1.0, high=1.03)  # the pooled one: its own test below
    rs = res.results
    assert uninformative(rs.table[0].ebc)
    assert not uninformative(replace(rs.table[0].ebc, low=0.9, high=0.9 * UNINFORMATIVE_SPAN))
    assert uninformative(replace(rs.table[0].ebc, low=0.9, high=0.91 * UNINFORMATIVE_SPAN))
    assert uninformative(replace(rs.table[0].ebc, high=math.inf))
    sentence = interval_sentence(study, res)
    assert sentence.startswith(f"With {rs.n_effective:.1f} effective annotators")
    assert "the EB-C interval at l = 10 is not informative (it runs from 0.682 to 5.4·10⁷)" in (
        sentence
    )
    # The planner's number, computed here the way the page does.
    need = annotators_for_halfwidth(study, res.plan, rs.n_annotators)
    assert need.total is not None and need.more == need.total - rs.n_annotators > 0
    assert f"the planner says {need.more:,} more annotators ({need.total:,} in all" in sentence
    assert "for a half-width of 0.1" in sentence
    # The total is the plan's judgments per cell at today's judgments per annotator.
    per = res.plan.judgments_per_cell_now / rs.n_annotators
    assert need.total == max(
        need.plan.annotators_needed, math.ceil(need.plan.judgments_per_cell / per)
    )
    # A narrower half-width asks for more.
    assert annotators_for_halfwidth(study, res.plan, rs.n_annotators, 0.05).total > need.total


def test_an_impossible_half_width_says_why(session, pilot):
    study, res = pilot
    need = annotators_for_halfwidth(study, res.plan, 5, halfwidth=1e-9)
    assert need.total is None and need.more is None and need.plan is None
    assert "more than any study collects" in need.reason


def render_page(settings, ctx) -> str:
    """The results template rendered as the route renders it (a request for its URLs)."""
    app = create_app(settings)
    scope = {
        "type": "http", "app": app, "router": app.router, "method": "GET", "path": "/",
        "root_path": "", "scheme": "http", "server": ("testserver", 80), "headers": [],
        "query_string": b"",
    }  # fmt: skip
    return templates.env.get_template("nextword/results.html").render(
        **ctx, request=Request(scope), user=None, csrf="x", notices=[], query_string=""
    )


def test_the_page_says_it_in_words_and_shows_the_arrow(session, settings, pilot):
    study, res = pilot
    ctx = results_context(study, res, None, res.plan, PageQuery(b=500))
    html = render_page(settings, ctx)
    said = re.search(r'<p class="error" id="uninformative" role="status">(.*?)</p>', html, re.S)
    assert said and "5.4·10⁷" in said.group(1) and "more annotators" in said.group(1)
    # The table writes the end readably too, and the plot carries the arrow.
    assert "[0.682, 5.4·10⁷]" in html
    svg = base64.b64decode(ctx["plot"]).decode()
    assert 'id="clipped-high-10"' in svg


def test_informative_intervals_need_no_sentence(session, pilot):
    study, res = pilot
    narrow = with_pilot_interval(res, estimate=1.02, low=1.0, high=1.04)
    rs = narrow.results
    wide_rest = [r for r in rs.table if uninformative(r.ebc)]
    if wide_rest:  # the other length of this pilot is still wide: named alone
        assert "the EB-C interval at l = 20 is not informative" in interval_sentence(study, narrow)
    every = with_pooled_interval(every_length_narrow(narrow), low=1.0, high=1.03)
    assert interval_sentence(study, every) is None


def test_an_uninformative_pooled_interval_is_said_in_words(session, settings, pilot):
    """Every length's interval informative, the pooled one (the headline over the lengths)
    not: the sentence names it with its ends and the planner's answer, on the page too."""
    study, res = pilot
    pooled_only = with_pooled_interval(every_length_narrow(res), estimate=1.304, low=0.682,
                                       high=53_974_915.931)  # fmt: skip
    rs = pooled_only.results
    sentence = interval_sentence(study, pooled_only)
    assert sentence.startswith(f"With {rs.n_effective:.1f} effective annotators the EB-C "
                               "interval pooled over the lengths is not informative (it runs "
                               "from 0.682 to 5.4·10⁷): the planner says")  # fmt: skip
    need = annotators_for_halfwidth(study, res.plan, rs.n_annotators)
    assert f"{need.more:,} more annotators" in sentence
    ctx = results_context(study, pooled_only, None, pooled_only.plan, PageQuery(b=500))
    html = render_page(settings, ctx)
    said = re.search(r'<p class="error" id="uninformative" role="status">(.*?)</p>', html, re.S)
    assert said and "pooled over the lengths is not informative" in said.group(1)
    assert "5.4·10⁷" in said.group(1)
    # Unbounded: written as infinity.
    endless = with_pooled_interval(pooled_only, high=math.inf)
    assert "(it runs from 0.682 to ∞)" in interval_sentence(study, endless)
    # A length's and the pooled interval wide: both named, each with its ends.
    both = with_pooled_interval(with_pilot_interval(every_length_narrow(res), **PILOT),
                                low=0.5, high=9.0)  # fmt: skip
    said = interval_sentence(study, both)
    assert "the EB-C intervals at l = 10 and pooled over the lengths are not informative" in said
    assert "(at l = 10 it runs from 0.682 to 5.4·10⁷; pooled over the lengths it runs from " in (
        said
    )
    # Every interval wide: "no EB-C interval here", the pooled one's ends among the others.
    every = with_pooled_interval(
        with_pilot_interval(res, **PILOT).model_copy(
            update={"results": with_pilot_interval(res, **PILOT).results.model_copy(
                update={"table": [r.model_copy(update={"ebc": replace(r.ebc, low=0.1, high=20)})
                                  for r in res.results.table]})}),
        low=0.2, high=30.0,
    )  # fmt: skip
    said = interval_sentence(study, every)
    assert "no EB-C interval here is informative" in said
    assert said.count(" it runs from ") == 3 and "pooled over the lengths it runs from 0.2" in said


def test_a_browser_shows_the_sentence_and_the_clipped_plot(session, settings, pilot):
    """The server-rendered page in Chromium: the sentence is visible above the table and
    the plot (an <img> of the SVG) loads and is drawn; a screenshot goes to
    var/screenshots/ (CI artifacts)."""
    import playwright.sync_api as playwright_api

    from app.config import ROOT
    from tests.browser.test_annotate_browser import CHROMIUM

    study, res = pilot
    html = render_page(settings, results_context(study, res, None, res.plan, PageQuery(b=500)))
    shots = ROOT / "var" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_content(html, wait_until="load")
        page.add_style_tag(path=str(ROOT / "app" / "static" / "style.css"))
        said = page.locator("#uninformative")
        assert said.is_visible() and "5.4·10⁷" in said.inner_text()
        assert "more annotators" in said.inner_text()
        box, table = said.bounding_box(), page.locator("table.results").first.bounding_box()
        assert box["y"] < table["y"]  # said before the figures
        plot = page.locator("#plot")
        plot.scroll_into_view_if_needed()
        assert plot.evaluate("img => img.complete && img.naturalWidth > 500")
        page.screenshot(path=str(shots / "results-pilot-clipped.png"), full_page=True)
        browser.close()
