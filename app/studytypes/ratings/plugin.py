"""The ratings study type's plug-in: what the registry hands out for a ratings study."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.models import Study, StudyType
from app.results.schemas import EBMOut, ResultsOut
from app.results.stats.ebm import SCORE_LABELS, SCORES
from app.studies.schemas import config_from_columns
from app.studytypes.base import StudyTypePlugin
from app.studytypes.ratings import annotation, ebm, ebm_exports, exports, hits, queries, results
from app.studytypes.ratings.downloads import CATALOGUE, DOWNLOADS
from app.studytypes.ratings.http_crowd import RatingsCrowd
from app.studytypes.ratings.preview import RatingsPreviewer

# The next-word figures a ratings study does not have (its answers are ratings).
NEXTWORD_FIGURES = ("diagnostics", "planner")


class Scores:
    """EB-M: the continuations' automatic scores, stored by a results job."""

    error = ebm.ScoreError

    def score(self, session: Session, study: Study, *, b: int, seed: int, by: Any) -> None:
        ebm.score_study(session, study, b=b, seed=seed, by=by)

    def stored(self, session: Session, study: Study) -> EBMOut | None:
        return ebm.stored_ebm(session, study)

    def text(self, slug: str, stored: EBMOut | None, label: str, fmt: str) -> str:
        if fmt == "csv":
            return ebm_exports.ebm_csv(slug, stored)
        if fmt == "latex":
            return ebm_exports.ebm_latex(slug, stored, label)
        return ebm_exports.ebm_table(slug, stored)


class Ratings(StudyTypePlugin):
    name = StudyType.ratings
    label = "rate continuations (EB-M)"
    noun = "a ratings"
    preview_title = "Rate short texts"
    answers_label = "Ratings"
    items_label = "Pairs"
    offline_batch = False
    crowd_description = (
        "Rate short texts: first how well written each one is, then how well it fits the "
        "text before it. About 10 texts per HIT; a research study on language models."
    )
    crowd_keywords = ("language", "rating", "text quality", "research")
    preview = RatingsPreviewer()
    http_crowd = RatingsCrowd()
    downloads = DOWNLOADS
    catalogue = CATALOGUE
    scores = Scores()

    def words_after_prefix(self, study):
        # The real continuation: EB-M's references and the attention pairs' words.
        return config_from_columns(study).ratings.continuation_words

    def placeable(self, query):
        return hits.placeable(query)

    def attention_ready(self, row, min_prob):
        return hits.attention_ready(row, min_prob)

    def screen_order(self, screen):
        return []  # a pair has no choices

    def load_attention_items(self, session, study, rows):
        return hits.load_attention_items(session, study, rows)

    def answers_per_cell(self, session, items):
        return queries.ratings_per_cell(session, items)

    def page(self, session, lease, study, now, *, first_hit, refused=None):
        return annotation.page(session, lease, study, now, first_hit=first_hit)

    def send(self, session, annotator, form):
        return annotation.send(session, annotator, form)

    def mturk_fields(self, session, assignment):
        return annotation.mturk_fields(session, assignment)

    def store_copy(self, session, study, annotator, lease, copy, when):
        annotation.store_copy(session, study, annotator, lease, copy, when)

    def results_document(
        self, session: Session, study: Study, query: Any, *, started: float | None = None
    ) -> ResultsOut:
        return results.ratings_document(session, study, query, started=started)

    def check_options(self, query: Any) -> None:
        results.ratings_query(query)

    def results_text(self, res: ResultsOut, fmt: str, label: str, *, paper: bool) -> str:
        if fmt == "csv":
            return exports.ratings_table_csv(res)
        if fmt == "latex":
            return exports.ratings_latex(res, label, paper=paper)
        return exports.ratings_table(res)

    def results_page(self, session: Session, study: Study, options: Any) -> tuple[str, dict]:
        # Ratings, not judgments: quality and consistency, and the EB-M scores as a results
        # job stored them.
        query = options.results_query()
        res = results.ratings_document(session, study, query)
        return self.template("results.html"), {
            "study": study,
            "res": res,
            "query": query,
            "ebm": res.ebm,
            "ebm_rows": ebm_exports.ebm_view(res.ebm) if res.ebm else [],
            "score_labels": [SCORE_LABELS[n] for n in SCORES],
            "downloads": list(self.catalogue),
        }

    def annotator_quality(self, session: Session, study: Study) -> dict[int, Any]:
        return {q.annotator_id: q for q in results.rater_quality_rows(session, study)}

    def annotators_context(self, study: Study) -> dict[str, Any]:
        return {"attention_max": results.study_attention_max(study)}

    def answers(self, session: Session, study: Study) -> queries.Ratings:
        return queries.load_ratings(session, study)

    def refusal(self, study: Study, what: str) -> str:
        if what in NEXTWORD_FIGURES:
            return f"{study.slug} is a ratings study: it has no {what} (a next-word figure)."
        if what == "batch":
            # Its quality must be stored before the context is shown: a static template
            # cannot hold that, the service's own pages do (ExternalQuestion, panel, invite).
            return (
                f"Study {study.slug} collects ratings: the MTurk-format batch is for next-word "
                "studies. Use the MTurk ExternalQuestion (ebc crowd publish), a panel or "
                "invite links."
            )
        return super().refusal(study, what)


RATINGS = Ratings()
