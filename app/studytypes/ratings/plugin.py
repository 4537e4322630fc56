"""The ratings study type's plug-in: what the registry hands out for a ratings study."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.models import Study, StudyType
from app.results.queries import latest_score
from app.results.schemas import EBMOut
from app.studytypes.base import Parts, StudyTypePlugin
from app.studytypes.ratings import (
    annotation,
    dashboard,
    downloads,
    ebm,
    ebm_exports,
    hits,
    http_crowd,
    preview,
    results,
)


class Scores:
    """EB-M: the continuations' automatic scores, stored by a results job."""

    label = "EB-M"
    error = ebm.ScoreError

    def score(
        self,
        session: Session,
        study: Study,
        *,
        b: int = ebm.DEFAULT_B,
        seed: int = 0,
        by: Any,
        dataset: Any = None,
    ) -> None:
        ebm.score_study(session, study, b=b, seed=seed, by=by, dataset=dataset)

    def computed_at(self, session: Session, study: Study) -> Any:
        last = latest_score(session, study, ebm.NAME)
        return None if last is None else last.computed_at

    def stored(self, session: Session, study: Study) -> EBMOut | None:
        return ebm.stored_ebm(session, study)

    def text(self, slug: str, stored: EBMOut | None, label: str, fmt: str) -> str:
        if fmt == "csv":
            return ebm_exports.ebm_csv(slug, stored)
        if fmt == "latex":
            return ebm_exports.ebm_latex(slug, stored, label)
        return ebm_exports.ebm_table(slug, stored)


# What a ratings study does not have, in its words: the next-word figures (its answers are
# ratings) and the MTurk-format batch (its quality must be stored before the context is
# shown: a static template cannot hold that; the service's own pages do).
REFUSALS = {
    "diagnostics": "{slug} is a ratings study: it has no diagnostics (a next-word figure).",
    "planner": "{slug} is a ratings study: it has no planner (a next-word figure).",
    "batch": (
        "Study {slug} collects ratings: the MTurk-format batch is for next-word studies. Use "
        "the MTurk ExternalQuestion (ebc crowd publish), Prolific or invite links."
    ),
}

RATINGS = StudyTypePlugin(
    name=StudyType.ratings,
    label="rate continuations (EB-M)",
    noun="a ratings",
    parts=Parts(hits, annotation, results, dashboard, preview, http_crowd, downloads),
    scores=Scores(),
    refusals=REFUSALS,
)
