"""The results page and its downloads (figures from app.results.service)."""

from __future__ import annotations

import math
import re

from sqlalchemy import select

from app.models import AuditEvent
from tests.factories import StudyFactory


def _study_with_judgments(session):
    f = StudyFactory(session, "r1", lengths=(10, 20))
    for a in range(4):
        who = f.annotator(f"ann{a}")
        for length in (10, 20):
            items = [f.item("data", length) for _ in range(2)] + [
                f.item("model", length) for _ in range(2)
            ]
            f.answer(who, f.hit(items), [0, (a + 1) % 5, None, a % 5])
    session.commit()
    return f.study


def test_results_page_table_plot_planner_and_selectors(logged_in, session):
    _study_with_judgments(session)
    r = logged_in.get("/dashboard/studies/r1/results?b=1000&unit=hit&estimator=plurality")
    assert r.status_code == 200 and r.template.name == "nextword/results.html"
    res = r.context["res"]
    assert [row.length for row in res.results.table] == [10, 20]
    assert res.options.unit == "hit" and res.options.estimator == "plurality"
    assert "resampling unit hit" in r.text and "CGD(M|D) data" in r.text
    assert 'src="data:image/svg+xml;base64,' in r.text
    assert "Power and budget planner" in r.text and r.context["plan"] is not None
    # The downloads that depend on the options carry them; the footer says when and by what.
    query = "b=1000&amp;unit=hit&amp;estimator=plurality"
    assert f'/dashboard/studies/r1/results/results.csv?{query}" download' in r.text
    assert f'/dashboard/studies/r1/results/results.tex?paper=true&{query}"' in r.text
    assert f"Computed in {res.seconds:.2f} s by ebc-judge {res.service_version}" in r.text
    planned = logged_in.get("/dashboard/studies/r1/results?b=1000&target_ebc=1.05&power=0.9")
    assert planned.context["plan"].target_ebc == 1.05
    assert logged_in.get("/dashboard/studies/r1/results?unit=nope").status_code == 400


def test_downloads_are_served_and_audited(logged_in, session):
    study = _study_with_judgments(session)
    base = "/dashboard/studies/r1/results"
    csv = logged_in.get(f"{base}/results.csv?b=1000")
    assert (
        csv.headers["content-type"].startswith("text/csv")
        and "attachment" in csv.headers["content-disposition"]
    )
    assert logged_in.get(f"{base}/plot.svg?b=1000").content.lstrip().startswith(b"<?xml")
    assert logged_in.get(f"{base}/judgments.jsonl").text.count("\n") == 32
    assert logged_in.get(f"{base}/manifest.json").json()["study"] == "r1"
    assert "\\begin{tabular}" in logged_in.get(f"{base}/results.tex?b=1000&paper=true").text
    assert logged_in.get(f"{base}/secrets.txt").status_code == 404
    session.expire_all()
    exports = session.scalars(
        select(AuditEvent).where(AuditEvent.study_id == study.id, AuditEvent.action == "export")
    ).all()
    assert [e.detail["what"] for e in exports] == [
        "results.csv",
        "plot.svg",
        "judgments.jsonl",
        "manifest.json",
        "results.tex",
    ]


def test_results_page_names_the_headline_test_and_the_effective_annotators(logged_in, session):
    _study_with_judgments(session)
    r = logged_in.get("/dashboard/studies/r1/results?b=1000")
    assert r.status_code == 200
    rs = r.context["res"].results
    assert rs.ci == "wild" and [t.length for t in rs.tests] == [10, 20, None]
    page = r.text
    # The headline test, its null and its method; the permutation test as secondary.
    assert "population EB-C = 1, annotators as the sampled unit" in page
    assert "wild cluster bootstrap-t" in page and "Within-HIT permutation p (secondary)" in page
    assert "exact only under the sharp null that no annotator treats data" in page
    row = rs.table[0]
    assert f"{row.test.p_value:.4f}" in page
    # G and the effective G with every figure; 4 annotators: the warning on effective G.
    assert f"4 annotators (effective {row.ebc.n_effective:.1f})" in page
    assert "Fewer than 30 effective annotators" in page
    assert any("effective number" in m for m in r.context["res"].messages)


def test_a_figure_without_a_value_shows_as_a_dash(logged_in, session):
    """One annotator: the CGD's interval, the tests and the design effect are NaN (JSON
    null); the page shows no value, never "nan" or "inf"."""
    f = StudyFactory(session, "solo")
    items = [f.item("data") for _ in range(2)] + [f.item("model") for _ in range(2)]
    f.answer(f.annotator("only"), f.hit(items), [0, 1, None, 0])
    session.commit()
    r = logged_in.get("/dashboard/studies/solo/results?b=1000")
    assert r.status_code == 200
    row = r.context["res"].results.table[0]
    assert math.isnan(row.cgd_data.se) and math.isnan(row.ebc.high)
    # Attribute values hold random tokens (CSRF), which may spell "nan" or "inf".
    page = re.sub(r'="[^"]*"', "", r.text).lower()
    assert "nan" not in page.replace("none of the above", "")
    assert "inf" not in page.replace("informative", "")
    # No interval at all is said in words, not drawn as an unbounded one.
    assert "at l = 10 there is no interval (too few annotators to compute one)" in r.text
    assert '<span class="est">0.500</span>' in r.text and "[?" not in r.text
    assert '<span class="se">' not in r.text.split("<tbody>")[1].split("</tr>")[0]


def _crowd_with_an_assisted_annotator(session, slug: str):
    """Twelve annotators answering at random (rank 0..4 or none) and one who always picks
    the model's top-1 word; 3 HITs of 6 items each."""
    import numpy as np

    f = StudyFactory(session, slug)
    rng = np.random.default_rng(4)
    people = [f.annotator(f"honest{a}") for a in range(12)] + [f.annotator("copilot")]
    for who in people:
        for _ in range(3):
            items = [f.item("data") for _ in range(3)] + [f.item("model") for _ in range(3)]
            ranks = (
                [0] * 6
                if who.label == "copilot"
                else [None if r == 5 else int(r) for r in rng.integers(0, 6, 6)]
            )
            f.answer(who, f.hit(items), ranks)
    session.commit()
    return f.study


def test_results_page_names_the_llm_assisted_annotator(logged_in, session):
    _crowd_with_an_assisted_annotator(session, "llm")
    r = logged_in.get("/dashboard/studies/llm/results?b=1000")
    assert r.status_code == 200
    flagged = [q.label for q in r.context["res"].quality if q.assisted]
    assert flagged == ["copilot"]
    section = r.text.split("<h2>LLM assistance</h2>")[1].split("<h2>")[0]
    assert "copilot (1.00 against" in section and "honest" not in section


def test_every_judgment_excluded_still_shows_the_figures_without_exclusions(logged_in, session):
    from tests.factories import answered_study
    from tests.results.test_all_excluded import exclude_everyone

    study = answered_study(session, "allout")
    exclude_everyone(session, study)
    session.commit()
    r = logged_in.get("/dashboard/studies/allout/results?b=1000")
    assert r.status_code == 200
    res = r.context["res"]
    assert res.exclusions.n_kept == 0 and not res.results.exclusions_applied
    assert 'id="all-excluded"' in r.text and "No judgments to estimate from yet" not in r.text
    assert "Main figures, exclusions not applied" in r.text and "CGD(M|D) data" in r.text
    assert 'src="data:image/svg+xml;base64,' in r.text


def test_the_planner_prices_its_plan_on_each_channel_with_its_fees(logged_in, session, settings):
    """The plan's cost per channel is that platform's own fee rule on the plan's HITs
    (MTurk 20% of the reward with a 1-cent minimum, Prolific its fee rate, local none)."""
    study = _study_with_judgments(session)
    study.reward_cents = 37
    session.commit()
    r = logged_in.get("/dashboard/studies/r1/results?b=1000")
    plan, costs = r.context["plan"], r.context["plan_costs"]
    assert {c.provider for c in costs} == {"mturk", "prolific", "local"}
    by = {c.provider: c.estimate for c in costs}
    assert all(c.assignments == plan.assignments for c in costs)
    assert by["mturk"].rewards_cents == 37 * plan.assignments
    assert by["mturk"].fees_cents == 7 * plan.assignments  # 20% of 37 cents, half up
    rate = settings.prolific_fee_rate
    assert by["prolific"].fees_cents == math.floor(37 * plan.assignments * rate + 0.5)
    assert by["local"].fees_cents == 0
    table = re.search(r'<table class="grid compact" id="plan-costs">.*?</table>', r.text, re.S)
    assert table and f"${by['mturk'].total_cents / 100:,.2f}" in table.group(0)
