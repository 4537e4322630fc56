"""A ratings study's parts of the researcher's pages: its results page (Table 3, agreement,
quality control, EB-M) and what its Annotators page reads."""

from __future__ import annotations

import base64
from typing import Any

from sqlalchemy.orm import Session

from app.models import Study
from app.results.stats.ebm import SCORE_LABELS, SCORES
from app.studytypes.ratings import ebm_exports, results
from app.studytypes.ratings.downloads import CATALOGUE

ANSWERS_LABEL, ITEMS_LABEL = "Ratings", "Pairs"  # as the study page names them


def results_page(
    session: Session, study: Study, options: Any, *, costs: Any = None
) -> tuple[str, dict]:
    """The results page's template and context (`options`: the page's query). Ratings, not
    judgments: quality and consistency, and the EB-M scores as a results job stored them."""
    query = options.results_query()
    res = results.ratings_document(session, study, query)
    names = res.ebm.scores.names if res.ebm else SCORES
    gap_rows = ebm_exports.ebm_gap_view(res.ebm) if res.ebm else []
    gap_plot = None
    if gap_rows:
        svg = ebm_exports.ebm_gap_plot(study.slug, res.ebm, "svg")
        gap_plot = base64.b64encode(svg).decode()
    return "ratings/results.html", {
        "study": study,
        "res": res,
        "query": query,
        "ebm": res.ebm,
        "ebm_rows": ebm_exports.ebm_view(res.ebm) if res.ebm else [],
        "ebm_gap_rows": gap_rows,
        "ebm_gap_plot": gap_plot,
        "score_labels": [SCORE_LABELS[n] for n in names],
        "downloads": [n for n in CATALOGUE if gap_rows or not n.startswith("ebm_gap.")],
    }


def annotators_context(study: Study) -> dict[str, Any]:
    """The quality an attention pair should get at most, for the page's column."""
    return {"attention_max": results.study_attention_max(study)}
