"""The next-word study type's plug-in: what the registry hands out for a next-word study."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.models import Study, StudyType
from app.results.schemas import DiagnosticsOut, RecoveryOut
from app.results.stats import StudyPlan
from app.studytypes.base import Parts, StudyTypePlugin
from app.studytypes.nextword import (
    annotation,
    dashboard,
    diagnostics,
    downloads,
    hits,
    http_crowd,
    planning,
    preview,
    recovery,
    results,
)


class Diagnostics:
    """CGD per prefix kind and length from people and from the reference model."""

    def compute(self, session: Session, study: Study, query: Any) -> DiagnosticsOut:
        return diagnostics.study_diagnostics(session, study, query)

    def text(self, diag: DiagnosticsOut, fmt: str) -> str:
        if fmt == "csv":
            return diagnostics.diagnostics_csv(diag)
        return diagnostics.diagnostics_table(diag)

    def recovery(self, session: Session, study: Study, query: Any) -> RecoveryOut:
        """The self-recovery figures' data: EB-C_gap against l_gap, CGD against c."""
        return recovery.study_recovery(session, study, query)


class Planner:
    """The power and budget planner, measured on the study's judgments."""

    def plan(self, session: Session, study: Study, target: Any, *, seed: int) -> StudyPlan:
        return planning.study_plan(session, study, target, seed=seed)


NEXTWORD = StudyTypePlugin(
    name=StudyType.nextword,
    label="pick the next word (EB-C)",
    noun="a next-word",
    parts=Parts(hits, annotation, results, dashboard, preview, http_crowd, downloads),
    offline_batch=annotation.submit,
    diagnostics=Diagnostics(),
    planner=Planner(),
    refusals={"EB-M": "{slug} is a next-word study: EB-M scores ratings studies"},
)
