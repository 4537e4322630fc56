"""Crowd channels of a ratings study: published with a description of what its workers do;
the MTurk-format batch refused (a static template cannot lock a quality before the context
is shown; the ExternalQuestion, panel and invite pages do)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.crowd.batch import BatchError, export_batch
from app.crowd.common import PublishOptions, provider_for, resolved_options
from app.crowd.imports import import_results
from app.models import Assignment, Rating
from tests.hits.ratings_factory import make_ratings_study


def test_a_ratings_study_has_no_batch_export_or_import(session):
    study = make_ratings_study(session, per_cell=5)
    with pytest.raises(BatchError, match="collects ratings"):
        export_batch(session, study)
    header = "HITId,AssignmentId,WorkerId,AssignmentStatus,Input.hit,Answer.q0\r\n"
    with pytest.raises(BatchError, match="collects ratings"):
        import_results(session, study, header + "H,A,W,Submitted,1,3\r\n", source="lab", by=None)
    assert session.scalar(select(func.count(Assignment.id))) == 0
    assert session.scalar(select(func.count(Rating.id))) == 0


def test_publishing_a_ratings_study_describes_rating_not_guessing(session, settings):
    study = make_ratings_study(session, per_cell=5, reward_cents=50)
    mturk = provider_for(settings, "mturk")
    out = resolved_options(study, PublishOptions(), mturk)
    assert out["description"].startswith("Rate short texts") and "next word" not in str(out)
    mine = PublishOptions(description="Rate these.", keywords=("rate",))
    out = resolved_options(study, mine, mturk)
    assert (out["description"], out["keywords"]) == ("Rate these.", ["rate"])
