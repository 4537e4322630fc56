"""Results of a study, whatever its type: its plug-in's results document (a next-word study's
CGD and EB-C, a ratings study's mean ratings and EB-M; ``app.studytypes``), and the quality
figures of the Annotators page. Services read; they never commit."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session

from app.models import Study
from app.results.schemas import ResultQuery, ResultsOut
from app.studytypes.registry import study_type_of


def study_results(session: Session, study: Study, query: ResultQuery | None = None) -> ResultsOut:
    """All results of `study` for `query` (load and compute); options its type does not
    take raise ``app.studytypes.base.OptionNotForThisType``."""
    started = time.perf_counter()
    plugin = study_type_of(study)
    return plugin.results.document(session, study, query or ResultQuery(), started=started)


def quality_by_annotator(session: Session, study: Study) -> dict[int, Any]:
    """Per annotator id, the quality figures of the Annotators page (its type's: per
    judgment, or per rating), without error bars."""
    return study_type_of(study).results.quality(session, study)


__all__ = ["quality_by_annotator", "study_results"]
