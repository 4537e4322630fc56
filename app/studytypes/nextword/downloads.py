"""A next-word study's downloads: its figures (CSV, LaTeX, plot), its diagnostics and its
judgments; ``app.results.downloads`` serves them, with the manifest and the items."""

from __future__ import annotations

from typing import Literal

from sqlalchemy.orm import Session

from app.models import Study
from app.results.exports import task_label
from app.results.schemas import ResultQuery
from app.studytypes.base import DownloadSpec
from app.studytypes.nextword import exports
from app.studytypes.nextword.diagnostics import diagnostics_csv, study_diagnostics
from app.studytypes.nextword.plot import diagnostics_plot, results_plot
from app.studytypes.nextword.recovery import (
    recovery_csv,
    recovery_latex,
    recovery_plot,
    study_recovery,
)
from app.studytypes.nextword.results import study_results


def _results_csv(session: Session, study: Study, query: ResultQuery, paper: bool) -> str:
    return exports.results_csv(study_results(session, study, query))


def _results_tex(session: Session, study: Study, query: ResultQuery, paper: bool) -> str:
    res = study_results(session, study, query)
    return exports.results_latex(res, task_label(study), paper=paper)


def _plot(fmt: Literal["svg", "png"]):
    def render(session: Session, study: Study, query: ResultQuery, paper: bool) -> bytes:
        return results_plot(study_results(session, study, query), fmt)

    return render


def _diagnostics_csv(session: Session, study: Study, query: ResultQuery, paper: bool) -> str:
    return diagnostics_csv(study_diagnostics(session, study, query))


def _diagnostics_plot(fmt: Literal["svg", "png"]):
    def render(session: Session, study: Study, query: ResultQuery, paper: bool) -> bytes:
        return diagnostics_plot(study_diagnostics(session, study, query), fmt)

    return render


def _recovery_text(write):
    def render(session: Session, study: Study, query: ResultQuery, paper: bool) -> str:
        return write(study_recovery(session, study, query))

    return render


def _recovery_plot(fmt: Literal["svg", "png"]):
    def render(session: Session, study: Study, query: ResultQuery, paper: bool) -> bytes:
        return recovery_plot(study_recovery(session, study, query), fmt)

    return render


DOWNLOADS = {
    "results.csv": DownloadSpec("text/csv", render=_results_csv),
    "results.tex": DownloadSpec("application/x-tex", render=_results_tex),
    "plot.svg": DownloadSpec("image/svg+xml", render=_plot("svg")),
    "plot.png": DownloadSpec("image/png", render=_plot("png")),
    "diagnostics.csv": DownloadSpec("text/csv", render=_diagnostics_csv),
    "diagnostics.svg": DownloadSpec("image/svg+xml", render=_diagnostics_plot("svg")),
    "diagnostics.png": DownloadSpec("image/png", render=_diagnostics_plot("png")),
    "recovery.csv": DownloadSpec("text/csv", render=_recovery_text(recovery_csv)),
    "recovery.tex": DownloadSpec("application/x-tex", render=_recovery_text(recovery_latex)),
    "recovery.svg": DownloadSpec("image/svg+xml", render=_recovery_plot("svg")),
    "recovery.png": DownloadSpec("image/png", render=_recovery_plot("png")),
    "judgments.csv": DownloadSpec("text/csv", chunks=exports.judgments_csv),
    "judgments.jsonl": DownloadSpec("application/x-ndjson", chunks=exports.judgments_jsonl),
}
CATALOGUE = (
    "results.csv", "results.tex", "plot.svg", "plot.png", "manifest.json", "diagnostics.csv",
    "diagnostics.svg", "diagnostics.png", "recovery.csv", "recovery.tex", "recovery.svg",
    "recovery.png", "judgments.csv", "judgments.jsonl", "items.csv", "items.jsonl",
    "annotators.csv", "forced_samples.csv", "forced_samples.tex",
)  # fmt: skip
