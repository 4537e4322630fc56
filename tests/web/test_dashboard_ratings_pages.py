"""A ratings study's dashboard pages: its items show their continuations; its results page
shows its ratings (no next-word figures of a study that has no judgments)."""

from __future__ import annotations

from sqlalchemy import func, select

from app.annotation.leases import next_assignment
from app.models import Item, Rating
from app.studytypes.ratings.annotation import CONSISTENCY, QUALITY, RatingPost, rate
from tests.hits.factory import annotator
from tests.hits.ratings_factory import make_ratings_study


def test_a_ratings_study_results_page_shows_its_ratings(logged_in, session):
    study = make_ratings_study(session, per_cell=5)
    who = annotator(session, study)
    lease = next_assignment(session, who, serve=True).assignment
    for position in range(11):
        for step in (QUALITY, CONSISTENCY):
            rate(session, who, RatingPost(lease.public_id, position, step, "4", 4000))
    session.commit()
    assert session.scalar(select(func.count(Rating.consistency))) == 11
    r = logged_in.get(f"/dashboard/studies/{study.slug}/results?b=200")
    assert r.status_code == 200 and r.template.name == "ratings/results.html"
    assert "coming" not in r.text and "CGD(M|D)" not in r.text  # no next-word figures
    main = r.context["res"].ratings.results
    assert main.n_ratings == 10 and main.n_annotators == 1  # the attention pair aside
    assert all(c.mean == 4.0 for c in main.cells)
    assert 'id="ratings-main"' in r.text and "n = 5 ratings, 5 pairs, 1 annotator" in r.text


def test_a_ratings_study_items_show_their_continuations(logged_in, session):
    study = make_ratings_study(session, per_cell=5)
    session.commit()
    r = logged_in.get(f"/dashboard/studies/{study.slug}/items?attention=no")
    assert r.status_code == 200
    shown = session.scalars(
        select(Item).where(Item.is_attention.is_(False)).order_by(Item.length, Item.kind)
    ).all()
    assert all(item.continuation in r.text for item in shown)
    assert "Model rank" not in r.text and "True next word" not in r.text  # no choices
