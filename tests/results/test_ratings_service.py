"""A ratings study's results from ratings given through the ratings service: the columns
the statistics read, the figures with and without the study's exclusions (against the
statistics on the same columns and against a mean computed by hand), who is excluded and
why, the simulated flag, unconfirmed MTurk work."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select, update

from app.annotation.leases import next_assignment
from app.annotation.ratings import CONSISTENCY, QUALITY, RatingPost, rate
from app.models import Assignment, Rating
from app.results.exclusions import exclusion_mask
from app.results.queries_ratings import load_ratings
from app.results.ratings import study_ratings
from app.results.schemas import ResultQuery
from app.results.service import study_results
from app.results.stats.ratings import ratings_results
from tests.factories import StudyFactory
from tests.hits.factory import annotator
from tests.hits.ratings_factory import make_ratings_study
from tests.results.ratings_study import make_rated_study

QUERY = ResultQuery(b=200, seed=3)


@pytest.fixture
def rated(session):
    return make_rated_study(session)


def _ids(rated, *names):
    return np.array([rated.annotators[n].id for n in names])


def test_the_columns_are_the_stored_ratings(session, rated):
    r = load_ratings(session, rated.study)
    stored = session.scalars(select(Rating).order_by(Rating.id)).all()
    assert r.n == len(stored) == len(rated.posted) == 12 * 11
    assert r.rating_id.tolist() == [x.id for x in stored]
    assert r.item.tolist() == [x.item_id for x in stored]
    assert r.quality.tolist() == [x.quality for x in stored]
    assert r.consistency.tolist() == [x.consistency for x in stored]
    assert r.too_fast.tolist() == [x.too_fast for x in stored]
    assert r.kinds[:2] == ["data", "model"] and (r.scale_max, r.step) == (5, 0.5)
    by_item = {p.item_id: p for p in rated.posted}
    assert [r.kinds[k] for k in r.kind] == [by_item[i].kind for i in r.item.tolist()]
    assert r.length.tolist() == [by_item[i].length for i in r.item.tolist()]
    assert r.attention.tolist() == [by_item[i].attention for i in r.item.tolist()]
    assert r.attention.sum() == 12  # one attention pair per HIT, three raters each
    sim = rated.annotators["sim"].id
    assert r.simulated.tolist() == (r.annotator == sim).tolist() and r.simulated.any()
    assert r.too_fast.sum() == 2 and set(r.annotator[r.too_fast]) == {rated.annotators["steady"].id}
    assert not r.flagged(8).any()  # nothing unconfirmed


def test_the_rules_drop_the_blocked_the_careless_and_the_too_fast(session, rated):
    r = load_ratings(session, rated.study)
    keep, report = exclusion_mask(r, rated.study.exclusions)
    blocked, careless = _ids(rated, "blocked"), _ids(rated, "careless")
    assert not keep[np.isin(r.annotator, blocked)].any()
    assert not keep[np.isin(r.annotator, careless)].any()  # attention pairs rated 4 > 1
    assert not keep[r.too_fast].any()
    gone = np.isin(r.annotator, np.concatenate([blocked, careless])) | r.too_fast
    assert keep.tolist() == (~gone).tolist()
    assert report.annotators_excluded["blocked"] == ["blocked"]
    assert report.annotators_excluded["attention"] == ["careless"]
    assert report.excluded_by_rule["too_fast"] == 2 and report.n_kept == int(keep.sum())


def test_figures_with_and_without_exclusions(session, rated):
    out = study_ratings(session, rated.study, QUERY)
    main, other = out.results, out.other
    assert main.exclusions_applied and not other.exclusions_applied
    r = load_ratings(session, rated.study)
    keep, _ = exclusion_mask(r, rated.study.exclusions)
    want = ratings_results(r.subset(keep), b=200, seed=3, level=0.95)
    assert main.n_ratings == want.n_ratings and main.n_annotators == want.n_annotators == 4
    got = {(c.length, c.kind, c.step): c for c in main.cells}
    for c in want.cells:
        g = got[(c.length, c.kind, c.step)]
        assert (g.mean, g.ci_low, g.ci_high, g.n_annotators) == pytest.approx(
            (c.mean, c.ci_low, c.ci_high, c.n_annotators), nan_ok=True
        )
    # By hand: the quality after data prefixes of length 10, without the blocked and the
    # careless annotators and the too-fast ratings.
    row = next(x for x in main.table if x.length == 10)
    gone = ("blocked", "careless")
    by_hand = rated.mean(10, "data", "quality", drop=gone, fast=False)
    assert row.quality.data.mean == pytest.approx(by_hand)
    assert row.quality.contrast.gap == pytest.approx(
        by_hand - rated.mean(10, "model", "quality", drop=gone, fast=False)
    )
    # Without exclusions everybody counts (attention pairs aside): the blocked annotator's
    # ratings are back.
    assert other.n_ratings == 12 * 10 and main.n_ratings < other.n_ratings
    row = next(x for x in other.table if x.length == 20)
    assert row.consistency.model.mean == pytest.approx(rated.mean(20, "model", "consistency"))
    assert row.consistency.model.n_annotators == 6
    assert out.n_ratings == 132 and out.open_consistency == 0


def test_the_simulated_flag_and_who_was_excluded(session, rated):
    out = study_ratings(session, rated.study, QUERY)
    sim = [p for p in rated.posted if p.annotator == "sim" and not p.attention]
    assert out.results.n_simulated == len(sim) > 0
    assert out.results.simulated == f"includes {len(sim)} ratings from a simulated crowd"
    assert out.simulated_ratings == len(sim)
    quality = {q.label: q for q in out.quality}
    assert set(quality) == set(rated.annotators)
    assert quality["sim"].simulated and not quality["steady"].simulated
    assert quality["blocked"].blocked and quality["blocked"].excluded
    assert quality["careless"].excluded and quality["careless"].attention_pass == 0
    assert quality["steady"].attention_pass == 1 and not quality["steady"].excluded
    assert quality["steady"].n_ratings == 22 and quality["steady"].n_attention == 2


def test_the_results_document_of_a_ratings_study(session, rated):
    res = study_results(session, rated.study, QUERY.model_copy(update={"exclusions": "off"}))
    assert res.ratings is not None and res.results is None and res.quality == []
    assert not res.ratings.results.exclusions_applied and res.ratings.other.exclusions_applied
    assert res.exclusions.n_judgments == 132  # counted in ratings
    assert res.simulated_judgments == res.ratings.simulated_ratings > 0
    nw = StudyFactory(session, "nw")
    assert study_results(session, nw.study, QUERY).ratings is None


def test_unconfirmed_mturk_work_counts_in_neither(session, rated):
    lenient = rated.annotators["lenient"].id
    session.execute(
        update(Assignment).where(Assignment.annotator_id == lenient).values(unverified=True)
    )
    session.flush()
    out = study_ratings(session, rated.study, QUERY)
    kept = [p for p in rated.posted if not p.attention and p.annotator != "lenient"]
    assert out.other.n_ratings == len(kept)
    assert any("not yet confirmed" in m for m in out.messages)
    row = next(x for x in out.other.table if x.length == 10)
    assert row.quality.model.mean == pytest.approx(
        rated.mean(10, "model", "quality", drop=("lenient",))
    )


def test_no_ratings_yet(session):
    study = make_ratings_study(session, slug="empty", per_cell=5)
    out = study_ratings(session, study, QUERY)
    assert out.results is None and out.other is None and out.quality == []
    assert any("nothing to estimate" in m for m in out.messages)


def test_a_rater_between_the_two_steps(session):
    """A quality stored, its consistency not yet: counted in the quality figures only."""
    study = make_ratings_study(session, slug="half", per_cell=5)
    who = annotator(session, study)
    lease = next_assignment(session, who, serve=True).assignment
    for position in range(4):
        rate(session, who, RatingPost(lease.public_id, position, QUALITY, "3", 4000))
        rate(session, who, RatingPost(lease.public_id, position, CONSISTENCY, "2", 4000))
    rate(session, who, RatingPost(lease.public_id, 4, QUALITY, "5", 4000))
    r = load_ratings(session, study)
    assert r.n == 5 and np.isnan(r.consistency).tolist() == [False] * 4 + [True]
    out = study_ratings(session, study, QUERY)
    assert out.open_consistency == 1 and out.n_ratings == 5
    cells = out.results.cells
    regular = int((~r.attention).sum())
    assert sum(c.n_ratings for c in cells if c.step == "quality") == regular
    assert sum(c.n_ratings for c in cells if c.step == "consistency") == regular - int(
        not r.attention[4]
    )
