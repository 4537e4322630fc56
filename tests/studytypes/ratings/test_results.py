"""A ratings study's results from ratings given through the ratings service: the columns
the statistics read, the figures with and without the study's exclusions (against the
statistics on the same columns and against a mean computed by hand), who is excluded and
why, the simulated flag, unconfirmed MTurk work."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import func, select, update

from app.annotation.admin import block
from app.annotation.leases import next_assignment
from app.models import Assignment, Rating, utcnow
from app.results.exclusions import exclusion_mask
from app.results.queries import FLAG_AFTER_BLOCK
from app.results.schemas import ResultQuery
from app.results.service import study_results
from app.results.stats.agreement import AGREEMENT_B
from app.results.stats.ratings import ratings_results
from app.studytypes.base import OptionNotForThisType
from app.studytypes.ratings.annotation import CONSISTENCY, QUALITY, RatingPost, rate
from app.studytypes.ratings.queries import load_ratings
from app.studytypes.ratings.results import study_ratings
from app.studytypes.registry import study_type_of
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
    """A quality stored, its consistency not yet: the HIT is unfinished, so nothing of it
    counts yet; the ratings are stored and reported."""
    study = make_ratings_study(session, slug="half", per_cell=5)
    who = annotator(session, study)
    lease = next_assignment(session, who, serve=True).assignment
    for position in range(4):
        rate(session, who, RatingPost(lease.public_id, position, QUALITY, "3", 4000))
        rate(session, who, RatingPost(lease.public_id, position, CONSISTENCY, "2", 4000))
    rate(session, who, RatingPost(lease.public_id, 4, QUALITY, "5", 4000))
    assert len(session.scalars(select(Rating)).all()) == 5
    r = load_ratings(session, study)
    assert r.n == 0 and (r.unfinished_ratings, r.unfinished_hits) == (5, 1)
    out = study_ratings(session, study, QUERY)
    assert out.results is None and out.other is None and out.quality == []
    assert (out.n_ratings, out.open_consistency, out.unfinished_ratings) == (0, 0, 5)
    assert any("5 ratings in 1 unfinished HIT, not counted" in m for m in out.messages)


# --------------------------------------------------------------------------- review fixes


def _positions(session, lease) -> list[tuple[int, bool]]:
    """The HIT's positions in order, with whether each is an attention pair."""
    from app.models import HitPosition, Item

    return session.execute(
        select(HitPosition.position, Item.is_attention)
        .join(Item, Item.id == HitPosition.item_id)
        .where(HitPosition.hit_id == lease.hit_id)
        .order_by(HitPosition.position)
    ).all()


def _rate(session, who, lease, *, upto=None, start=0, now, attention="0.5", value="3"):
    """Rate the HIT's pairs from `start` (both steps) up to `upto` (None: to the end, which
    submits it): attention pairs `attention`, the others `value`."""
    rows = _positions(session, lease)[start:upto]
    for position, is_attention in rows:
        v = attention if is_attention else value
        rate(session, who, RatingPost(lease.public_id, position, QUALITY, v, 4000), now=now)
        rate(session, who, RatingPost(lease.public_id, position, CONSISTENCY, "2", 4000), now=now)
    return rows


def test_ratings_of_unfinished_hits_count_in_neither_variant(session):
    """A rating counts once its HIT is submitted (as a next-word judgment, stored only at
    submission): an unfinished HIT's ratings stay stored and are reported as a count."""
    from app.studytypes.ratings.exports import ratings_csv

    study = make_ratings_study(session, slug="unfinished", per_cell=10, replicas=1)
    done, partial = annotator(session, study, "done"), annotator(session, study, "partial")
    now = utcnow()
    finished = next_assignment(session, done, now=now, serve=True).assignment
    rows = _rate(session, done, finished, now=now)
    begun = next_assignment(session, partial, now=now, serve=True).assignment
    assert begun.hit_id != finished.hit_id
    _rate(session, partial, begun, upto=3, now=now, value="5")
    assert session.scalar(select(func.count(Rating.id))) == len(rows) + 3  # all stored

    r = load_ratings(session, study)
    assert set(r.annotator.tolist()) == {done.id} and r.n == len(rows)
    assert (r.unfinished_ratings, r.unfinished_hits) == (3, 1)
    out = study_ratings(session, study, QUERY)
    regular = sum(1 for _, att in rows if not att)
    for v in (out.results, out.other):
        assert v.n_ratings == regular and v.n_annotators == 1
    assert {c.mean for c in out.results.cells if c.step == "quality"} == {3.0}
    assert (out.n_ratings, out.unfinished_ratings, out.unfinished_hits) == (len(rows), 3, 1)
    assert [q.label for q in out.quality] == ["done"]
    assert "3 ratings in 1 unfinished HIT, not counted" in " ".join(out.messages)
    doc = study_results(session, study, QUERY)
    assert doc.exclusions.n_judgments == len(rows)
    assert any("3 ratings in 1 unfinished HIT" in m for m in doc.messages)
    # The raw export keeps every rating, with its assignment's status.
    exported = csv.DictReader(io.StringIO("".join(ratings_csv(session, study))))
    statuses = [row["assignment_status"] for row in exported]
    assert statuses.count("leased") == 3 and statuses.count("submitted") == len(rows)


def test_a_lapsed_hit_finished_late_takes_the_replica_rules(session):
    """X begins the only HIT and lets the lease lapse; Y takes the slot and finishes; X
    comes back and finishes late. X's ratings count in neither variant while X's HIT is
    unfinished, then as every late extra replica: without exclusions only."""
    study = make_ratings_study(session, slug="lapse", per_cell=5, replicas=1)
    x, y = annotator(session, study, "x"), annotator(session, study, "y")
    now = utcnow()
    lx = next_assignment(session, x, now=now, serve=True).assignment
    _rate(session, x, lx, upto=3, now=now)
    later = now + timedelta(hours=2)  # past x's lease: the slot is back in the pool
    ly = next_assignment(session, y, now=later, serve=True).assignment
    assert ly.hit_id == lx.hit_id
    _rate(session, y, ly, now=later)
    _rate(session, x, lx, start=3, upto=4, now=later)  # x, back, rates one more: unfinished

    r = load_ratings(session, study)
    assert set(r.annotator.tolist()) == {y.id} and r.unfinished_ratings == 4
    keep, _ = exclusion_mask(r, study.exclusions)
    assert np.bincount(r.item[keep & ~r.attention]).max() == 1  # one replica
    out = study_ratings(session, study, QUERY)
    assert out.results.n_annotators == out.other.n_annotators == 1

    _rate(session, x, lx, start=4, now=later)  # x finishes: a late extra replica
    session.expire_all()
    assert session.get(Assignment, lx.id).extra_replica
    r = load_ratings(session, study)
    keep, report = exclusion_mask(r, study.exclusions)
    assert r.unfinished_ratings == 0 and set(r.annotator.tolist()) == {x.id, y.id}
    assert not keep[r.annotator == x.id].any() and report.excluded_by_rule["extra_replica"] > 0
    out = study_ratings(session, study, QUERY)
    assert (out.results.n_annotators, out.other.n_annotators) == (1, 2)


def test_ratings_given_after_a_block_count_once_the_hit_is_submitted_flagged(session):
    study = make_ratings_study(session, slug="blk", per_cell=5, replicas=1)
    x = annotator(session, study, "x")
    now = utcnow()
    lease = next_assignment(session, x, now=now, serve=True).assignment
    _rate(session, x, lease, upto=2, now=now)
    block(session, x, reason="spam", exclude_past=False)
    session.flush()
    _rate(session, x, lease, start=2, upto=6, now=now)
    out = study_ratings(session, study, QUERY)
    assert out.results is None and out.other is None and out.unfinished_ratings == 6
    _rate(session, x, lease, start=6, now=now)  # the HIT is submitted, flagged after_block
    r = load_ratings(session, study)
    keep, report = exclusion_mask(r, study.exclusions)
    assert r.n > 0 and r.flagged(FLAG_AFTER_BLOCK).all() and not keep.any()
    assert report.excluded_by_rule["blocked"] == r.n


def test_the_agreement_bootstrap_takes_at_most_agreement_b_resamples(session, rated, monkeypatch):
    from app.results.stats import ratings_agreement

    drawn = []
    real = ratings_agreement.resample_pairs

    def spy(x, b, seed):
        drawn.append(b)
        return real(x, b, seed)

    monkeypatch.setattr(ratings_agreement, "resample_pairs", spy)
    out = study_ratings(session, rated.study, ResultQuery(b=AGREEMENT_B * 5, seed=3))
    assert out.results.b == AGREEMENT_B * 5 and out.results.agreement
    assert drawn and set(drawn) == {AGREEMENT_B}
    drawn.clear()
    study_ratings(session, rated.study, ResultQuery(b=300, seed=3))
    assert set(drawn) == {300}


@pytest.mark.parametrize(("scale_max", "passing", "failing"), [(5, "1", "1.5"), (10, "2", "2.5")])
def test_the_attention_rule_is_relative_to_the_scale(session, scale_max, passing, failing):
    """An attention pair passes at a quality of at most scale_max / 5 (1 on 0-5)."""
    study = make_ratings_study(
        session, slug=f"scale{scale_max}", per_cell=10, replicas=1, scale_max=scale_max
    )
    ok, bad = annotator(session, study, "ok"), annotator(session, study, "bad")
    now = utcnow()
    for who, value in ((ok, passing), (bad, failing)):
        _rate(session, who, next_assignment(session, who, now=now, serve=True).assignment,
              now=now, attention=value)  # fmt: skip
    r = load_ratings(session, study)
    assert r.attention_correct[r.attention].tolist() == [
        a == ok.id for a in r.annotator[r.attention]
    ]
    _, report = exclusion_mask(r, study.exclusions)
    assert report.annotators_excluded["attention"] == ["bad"]
    out = study_ratings(session, study, QUERY)
    assert {q.label: q.attention_pass for q in out.quality} == {"ok": 1.0, "bad": 0.0}
    assert r.attention_max == out.attention_max == scale_max / 5


def test_a_ratings_study_loads_no_judgments(session, rated, monkeypatch):
    from app.studytypes.nextword import queries

    def refuse(*_args, **_kwargs):
        raise AssertionError("a ratings study has no judgments to load")

    monkeypatch.setattr(queries, "load_judgments", refuse)
    res = study_results(session, rated.study, QUERY)
    assert res.ratings is not None and res.results is None


def test_next_word_options_are_refused_for_a_ratings_study(session, rated):
    for option, value in (("unit", "twoway"), ("estimator", "plurality"), ("ci", "bca")):
        with pytest.raises(OptionNotForThisType) as refused:
            study_results(session, rated.study, ResultQuery(**{option: value}))
        assert refused.value.field == option and "ratings study" in refused.value.message
    res = study_results(session, rated.study, ResultQuery(b=200, seed=3, exclusions="off"))
    assert res.options.model_dump() == {"b": 200, "seed": 3, "exclusions": "off", "level": 0.95}


def test_diagnostics_and_plan_are_next_word_only(session, rated):
    plugin = study_type_of(rated.study)
    assert plugin.diagnostics is None and plugin.planner is None
    for what in ("diagnostics", "planner"):
        refusal = plugin.refusal(rated.study, what)
        assert refusal == f"rated is a ratings study: it has no {what} (a next-word figure)."
