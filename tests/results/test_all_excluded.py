"""When the exclusion rules drop every judgment, the figures without exclusions are shown
in their place, labelled (issue 14), instead of nothing."""

from __future__ import annotations

from sqlalchemy import select

from app.models import Annotator
from app.results.schemas import ResultQuery, ResultsOut
from app.results.service import study_results
from app.results.stats import jsonable
from app.studytypes.nextword import exports
from tests.factories import answered_study


def exclude_everyone(session, study) -> None:
    for a in session.scalars(select(Annotator).where(Annotator.study_id == study.id)):
        a.blocked, a.exclude_past = True, True
    session.flush()


def test_every_judgment_excluded_shows_the_figures_without_exclusions(session):
    study = answered_study(session)
    before = study_results(session, study, ResultQuery(b=200)).other  # without exclusions
    exclude_everyone(session, study)
    res = study_results(session, study, ResultQuery(b=200))
    assert res.exclusions.n_kept == 0 and res.exclusions.n_judgments > 0
    assert res.results is not None and res.other is None
    assert res.results.exclusions_applied is False
    assert not before.exclusions_applied
    assert res.results.n_judgments == before.n_judgments > 0
    assert jsonable(res.results)["table"] == jsonable(before)["table"]
    assert any("every judgment is excluded" in m for m in res.messages)
    # The API's document says the same (it is this model, as JSON).
    doc = jsonable(res)
    assert doc["results"]["exclusions_applied"] is False and doc["other"] is None
    assert ResultsOut.model_validate(doc).results.n_judgments == res.results.n_judgments
    assert "without exclusions" in exports.results_table(res)
    # Asked for the figures without exclusions, nothing changes but the missing other.
    off = study_results(session, study, ResultQuery(b=200, exclusions="off"))
    assert jsonable(off.results) == jsonable(res.results) and off.other is None
    assert not any("every judgment is excluded" in m for m in off.messages)
