"""A ratings study's results page (Table 3 with intervals, the paper-comparable rows, the
agreement, quality control, with and without exclusions, the simulated-crowd banner, EB-M)
and its downloads on the dashboard; the study page's progress in ratings."""

from __future__ import annotations

import csv
import io
import re

import pytest
from markupsafe import escape

from app.results.exclusions import exclusion_mask
from app.results.stats.ratings import ratings_results
from app.studytypes.ratings.queries import load_ratings
from tests.factories import StudyFactory
from tests.results.ratings_study import FORMULA, make_rated_study

PAGE = "/dashboard/studies/rated/results"
B = 200


@pytest.fixture
def rated(session):
    made = make_rated_study(session)
    session.commit()
    return made


def _table(text: str, table_id: str) -> str:
    found = re.search(rf'<table class="grid results" id="{table_id}">.*?</table>', text, re.S)
    assert found is not None, table_id
    return found.group(0)


def _means(table: str, length: int) -> list[str]:
    """The texts of a row's mean cells: quality data, model, consistency data, model."""
    row = re.search(rf'<tr><th scope="row">{length}</th>(.*?)</tr>', table, re.S).group(1)
    return [re.sub(r"\s+", " ", c) for c in re.findall(r'<td class="mean">(.*?)</td>', row, re.S)]


def _shown(c) -> str:
    return f'{c.mean:.3f}</span> <span class="ci small">[{c.ci_low:.3f}, {c.ci_high:.3f}]'


def test_table_3_is_the_statistics_of_the_loaded_ratings(logged_in, session, rated):
    r = logged_in.get(f"{PAGE}?b={B}")
    assert r.status_code == 200 and r.template.name == "ratings/results.html"
    assert "coming" not in r.text and "CGD(M|D)" not in r.text
    cols = load_ratings(session, rated.study)
    keep, _ = exclusion_mask(cols, rated.study.exclusions)
    for table_id, mask in (("ratings-main", keep), ("ratings-other", None)):
        stats = ratings_results(cols if mask is None else cols.subset(mask), b=B, seed=0)
        table = _table(r.text, table_id)
        for length in (10, 20):
            cells = {(c.step, c.kind): c for c in stats.cells if c.length == length}
            shown = _means(table, length)
            order = [("quality", "data"), ("quality", "model")]
            order += [("consistency", "data"), ("consistency", "model")]
            for text, key in zip(shown, order, strict=True):
                c = cells[key]
                assert _shown(c) in text, (table_id, length, key)
                assert f"{c.n_annotators} annotators" in text
        gap = next(x for x in stats.contrasts if (x.length, x.step) == (20, "consistency"))
        assert f"{gap.ratio:.3f}" in table and f"{gap.effective_annotators:.1f})" in table
    # One cell by hand: consistency after model prefixes of length 10, with exclusions.
    by_hand = rated.mean(10, "model", "consistency", drop=("blocked", "careless"), fast=False)
    assert f"{by_hand:.3f}</span>" in _means(_table(r.text, "ratings-main"), 10)[3]


def test_the_page_labels_paper_rows_agreement_quality_and_the_simulated_crowd(logged_in, rated):
    r = logged_in.get(f"{PAGE}?b={B}")
    res = r.context["res"]
    sim = res.ratings.simulated_ratings
    assert sim > 0
    assert re.search(r'id="simulated".*?includes \d+ ratings from a simulated crowd', r.text)
    assert "Paper-comparable" in r.text and 'id="ratings-paper"' in r.text
    p = res.ratings.results.paper[0]
    assert f"{p.mean:.3f} ± {p.std:.3f}" in r.text
    assert 'id="ratings-agreement"' in r.text and "within one point" in r.text
    assert str(escape(res.ratings.results.agreement[0].paper)) in r.text  # which is the 65%
    quality = re.search(
        r'<table class="grid compact" id="ratings-quality">.*?</table>', r.text, re.S
    )
    assert quality and "careless" in quality.group(0) and "simulated</span>" in quality.group(0)
    assert "blocked: blocked" in r.text and "attention: careless" in r.text
    assert "No EB-M scores yet" in r.text  # the EB-M section, as before
    for name in ("ratings_table.csv", "ratings_table.tex", "ratings.csv", "ebm.csv"):
        assert f"/dashboard/studies/rated/results/{name}" in r.text
    assert "results.csv" not in r.text and "judgments.csv" not in r.text


def test_exclusions_off_makes_the_figures_without_them_the_main_ones(logged_in, rated):
    on = logged_in.get(f"{PAGE}?b={B}").context["res"].ratings
    off = logged_in.get(f"{PAGE}?b={B}&exclusions=off").context["res"].ratings
    assert off.results == on.other and off.other == on.results
    assert not off.results.exclusions_applied
    assert off.results.n_ratings > on.results.n_ratings


def test_people_only_no_banner_and_untrusted_text_escaped(logged_in, session):
    made = make_rated_study(session, slug="people", simulated=False)
    made.annotators["steady"].label = "<script>alert(1)</script>"
    session.commit()
    r = logged_in.get(f"/dashboard/studies/people/results?b={B}")
    assert r.status_code == 200 and 'id="simulated"' not in r.text
    assert "<script>alert(1)</script>" not in r.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text


def test_the_downloads(logged_in, session, rated):
    base = f"{PAGE}"
    rows = list(csv.DictReader(io.StringIO(logged_in.get(f"{base}/ratings.csv").text)))
    assert len(rows) == len(rated.posted)
    assert {r["continuation"] for r in rows if r["continuation"].startswith("'=")} == {
        "'" + FORMULA
    }
    table = logged_in.get(f"{base}/ratings_table.csv?b={B}")
    assert (
        table.status_code == 200
        and 'filename="rated-ratings_table.csv"' in table.headers["content-disposition"]
    )
    tex = logged_in.get(f"{base}/ratings_table.tex?b={B}&paper=true")
    assert tex.headers["content-type"].startswith("application/x-tex")
    assert "paper-comparable" in tex.text and "\\pm" in tex.text
    assert logged_in.get(f"{base}/results.csv").status_code == 404  # no next-word figures


def test_ratings_downloads_of_a_next_word_study_are_404(logged_in, session):
    StudyFactory(session, "nw")
    session.commit()
    for name in ("ratings.csv", "ratings_table.csv", "ratings_table.tex", "ebm.csv", "samples.csv"):
        r = logged_in.get(f"/dashboard/studies/nw/results/{name}")
        assert r.status_code == 404, name


def test_the_study_page_shows_progress_in_ratings(logged_in, session, rated):
    r = logged_in.get("/dashboard/studies/rated")
    assert r.status_code == 200
    table = re.search(r'<table class="grid compact" id="collection">.*?</table>', r.text, re.S)
    assert table and "Ratings (quality given) / target" in table.group(0)
    # 10 pairs of a cell, 3 ratings each; every one given both steps.
    assert table.group(0).count('<td class="cell-count">30 / 30</td>') == 4
    assert table.group(0).count('<td class="cell-consistency">30</td>') == 4


def _skip_pairs(session, study, length: int, kind: str, n: int) -> None:
    """Take `n` pairs of a cell out of the results (skipped), as a pair the worker could
    not make is."""
    from sqlalchemy import select, update

    from app.models import Item

    ids = session.scalars(
        select(Item.id)
        .where(Item.study_id == study.id, Item.length == length, Item.kind == kind)
        .where(Item.is_attention.is_(False))
        .order_by(Item.id)
        .limit(n)
    ).all()
    session.execute(update(Item).where(Item.id.in_(ids)).values(skip_reason="tests"))


def test_the_paper_runs_are_stated_per_length_when_they_differ(logged_in, session, rated):
    """l = 10 keeps its 10 pairs a kind (5 runs of 2), l = 20 only 5 data pairs (5 runs of
    1): every surface says which length has which runs, not the first row's for all."""
    from app.studytypes.ratings.exports import ratings_latex, ratings_table

    _skip_pairs(session, rated.study, 20, "data", 5)
    session.commit()
    r = logged_in.get(f"{PAGE}?b={B}")
    res = r.context["res"]
    runs = {(p.length, p.runs, p.pairs) for p in res.ratings.results.paper}
    assert runs == {(10, 5, 2), (20, 5, 1)}
    label = re.search(r'id="paper-label">(.*?)</p>', r.text, re.S).group(1)
    assert "Here: 5 runs of 2 pairs at l=10, 5 runs of 1 pair at l=20." in label
    paper = re.search(r'<table class="grid compact" id="ratings-paper">.*?</table>', r.text, re.S)
    cells = re.findall(r'<td class="runs">(.*?)</td>', paper.group(0))
    assert cells == ["5 \u00d7 2"] * 2 + ["5 \u00d7 1"] * 2  # runs x pairs, per row
    tex = ratings_latex(res, "LM", paper=True)
    assert "5 runs of 2 pairs at $l=10$, 5 runs of 1 pair at $l=20$" in tex
    text = ratings_table(res)
    runs = "5 runs of 2 pairs at l=10, 5 runs of 1 pair at l=20"
    assert f"paper-comparable (mean +- std over {runs})" in text


def test_the_attention_threshold_on_the_page_is_the_scales(logged_in, session):
    from app.annotation.leases import next_assignment
    from app.studytypes.ratings.annotation import CONSISTENCY, QUALITY, RatingPost, rate
    from tests.hits.factory import annotator
    from tests.hits.ratings_factory import make_ratings_study

    study = make_ratings_study(session, slug="ten", per_cell=10, replicas=1, scale_max=10)
    who = annotator(session, study, "rater")
    lease = next_assignment(session, who, serve=True).assignment
    for position in range(11):
        for step in (QUALITY, CONSISTENCY):
            rate(session, who, RatingPost(lease.public_id, position, step, "2", 4000))
    other = annotator(session, study, "unfinished")
    begun = next_assignment(session, other, serve=True).assignment
    rate(session, other, RatingPost(begun.public_id, 0, QUALITY, "2", 4000))
    session.commit()
    r = logged_in.get(f"/dashboard/studies/ten/results?b={B}")
    assert r.status_code == 200
    assert "is rated as expected when its quality is at most 2 (a fifth of the scale)" in r.text
    assert "Rated ≤ 2 (expected)" in r.text
    quality = r.context["res"].ratings.quality
    assert [(q.label, q.attention_pass) for q in quality] == [("rater", 1.0)]
    assert "1 rating in 1 unfinished HIT, not counted" in r.text


def test_next_word_options_on_the_ratings_page_are_refused(logged_in, rated):
    r = logged_in.get(f"{PAGE}?b={B}&unit=twoway")
    assert r.status_code == 400 and "unit is a next-word option" in r.text
    table = logged_in.get(f"{PAGE}/ratings_table.csv?b={B}&estimator=plurality")
    assert table.status_code == 400
    assert logged_in.get(f"{PAGE}/ratings_table.csv?b={B}&exclusions=off").status_code == 200
