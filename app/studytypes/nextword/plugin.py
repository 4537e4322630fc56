"""The next-word study type's plug-in: what the registry hands out for a next-word study."""

from __future__ import annotations

import base64
from typing import Any

from sqlalchemy.orm import Session

from app.models import Study, StudyType
from app.results.schemas import DiagnosticsOut, ResultsOut
from app.results.stats import PlanTarget, StudyPlan
from app.studytypes.base import StudyTypePlugin
from app.studytypes.nextword import (
    annotation,
    diagnostics,
    exports,
    hits,
    planning,
    queries,
    results,
)
from app.studytypes.nextword.downloads import CATALOGUE, DOWNLOADS
from app.studytypes.nextword.http_crowd import NextWordCrowd
from app.studytypes.nextword.plot import diagnostics_plot, results_plot
from app.studytypes.nextword.preview import NextWordPreview


class Diagnostics:
    """CGD per prefix kind and length from people and from the reference model."""

    def compute(self, session: Session, study: Study, query: Any) -> DiagnosticsOut:
        return diagnostics.study_diagnostics(session, study, query)

    def text(self, diag: DiagnosticsOut, fmt: str) -> str:
        if fmt == "csv":
            return diagnostics.diagnostics_csv(diag)
        return diagnostics.diagnostics_table(diag)


class Planner:
    def plan(self, session: Session, study: Study, target: Any, *, seed: int) -> StudyPlan:
        return planning.study_plan(session, study, target, seed=seed)


class NextWord(StudyTypePlugin):
    name = StudyType.nextword
    label = "pick the next word (EB-C)"
    noun = "a next-word"
    preview_title = "Guess the next word"
    answers_label = "Judgments"
    items_label = "Items"
    offline_batch = True
    crowd_description = (
        "Read the start of a short text and pick the word you think comes next. "
        "About 10 texts per HIT; a research study on language models."
    )
    crowd_keywords = ("language", "next word", "guess", "research")
    preview = NextWordPreview()
    http_crowd = NextWordCrowd()
    downloads = DOWNLOADS
    catalogue = CATALOGUE
    diagnostics = Diagnostics()
    planner = Planner()

    def attention_ready(self, row, min_prob):
        return hits.attention_ready(row, min_prob)

    def screen_order(self, screen):
        return hits.screen_order(screen)

    def load_attention_items(self, session, study, rows):
        return hits.load_attention_items(session, study, rows)

    def answers_per_cell(self, session, items):
        return queries.judgments_per_cell(session, items)

    def page(self, session, lease, study, now, *, first_hit, refused=None):
        return annotation.hit_page(session, lease, study, now, refused=refused)

    def send(self, session, annotator, form):
        return annotation.send(session, annotator, form)

    def mturk_fields(self, session, assignment):
        return annotation.mturk_fields(session, assignment)

    def store_copy(self, session, study, annotator, lease, copy, when):
        annotation.store_copy(session, study, annotator, lease, copy, when)

    def results_document(
        self, session: Session, study: Study, query: Any, *, started: float | None = None
    ) -> ResultsOut:
        return results.study_results(session, study, query, started=started)

    def results_text(self, res: ResultsOut, fmt: str, label: str, *, paper: bool) -> str:
        if fmt == "csv":
            return exports.results_csv(res)
        if fmt == "latex":
            return exports.results_latex(res, label, paper=paper)
        return exports.results_table(res)

    def results_page(self, session: Session, study: Study, options: Any) -> tuple[str, dict]:
        query = options.results_query()
        # One load of the judgments for the figures and the diagnostics (None: no section,
        # and no diagnostics downloads).
        res, diag = diagnostics.results_with_diagnostics(session, study, query)
        plan = res.plan  # the default target's
        if options.target() != PlanTarget():
            plan = planning.study_plan(session, study, options.target(), seed=query.seed)
        plot = None
        if res.results is not None:
            plot = base64.b64encode(results_plot(res, "svg")).decode()
        diag_plot = None
        if diag is not None:
            diag_plot = base64.b64encode(diagnostics_plot(diag, "svg")).decode()
        return self.template("results.html"), {
            "study": study,
            "res": res,
            "plan": plan,
            "plot": plot,
            "query": query,
            "planner": options,
            "diagnostics": diag,
            "diagnostics_plot": diag_plot,
            "downloads": [n for n in self.catalogue if diag or not n.startswith("diagnostics.")],
        }

    def annotator_quality(self, session: Session, study: Study) -> dict[int, Any]:
        return results.quality_by_annotator(session, study)

    def answers(self, session: Session, study: Study) -> queries.Judgments:
        return queries.load_judgments(session, study)

    def refusal(self, study: Study, what: str) -> str:
        if what == "EB-M":
            return f"{study.slug} is a next-word study: EB-M scores ratings studies"
        return super().refusal(study, what)


NEXTWORD = NextWord()
