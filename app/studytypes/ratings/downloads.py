"""A ratings study's downloads: its Table 3 (CSV, LaTeX), every rating, its stored EB-M (and
its EB-M_gap figure, SVG or PNG) and the prefix-switching samples; ``app.results.downloads``
serves them, with the manifest and the items."""

from __future__ import annotations

from typing import Literal

from sqlalchemy.orm import Session

from app.models import Study
from app.results.exports import task_label
from app.results.schemas import ResultQuery
from app.studytypes.base import DownloadSpec
from app.studytypes.ratings import ebm_exports, exports
from app.studytypes.ratings.ebm import stored_ebm
from app.studytypes.ratings.results import ratings_document


def _table_csv(session: Session, study: Study, query: ResultQuery, paper: bool) -> str:
    return exports.ratings_table_csv(ratings_document(session, study, query))


def _table_tex(session: Session, study: Study, query: ResultQuery, paper: bool) -> str:
    res = ratings_document(session, study, query)
    return exports.ratings_latex(res, task_label(study), paper=paper)


def _ebm_csv(session: Session, study: Study, query: ResultQuery, paper: bool) -> str:
    return ebm_exports.ebm_csv(study.slug, stored_ebm(session, study))


def _ebm_tex(session: Session, study: Study, query: ResultQuery, paper: bool) -> str:
    return ebm_exports.ebm_latex(study.slug, stored_ebm(session, study), task_label(study))


def _ebm_gap_plot(fmt: Literal["svg", "png"]):
    def render(session: Session, study: Study, query: ResultQuery, paper: bool) -> bytes:
        return ebm_exports.ebm_gap_plot(study.slug, stored_ebm(session, study), fmt)

    return render


DOWNLOADS = {
    "ratings_table.csv": DownloadSpec("text/csv", render=_table_csv),
    "ratings_table.tex": DownloadSpec("application/x-tex", render=_table_tex),
    "ratings.csv": DownloadSpec("text/csv", chunks=exports.ratings_csv),
    "ratings.jsonl": DownloadSpec("application/x-ndjson", chunks=exports.ratings_jsonl),
    "ebm.csv": DownloadSpec("text/csv", render=_ebm_csv),
    "ebm.tex": DownloadSpec("application/x-tex", render=_ebm_tex),
    "ebm_gap.svg": DownloadSpec("image/svg+xml", render=_ebm_gap_plot("svg")),
    "ebm_gap.png": DownloadSpec("image/png", render=_ebm_gap_plot("png")),
    "samples.csv": DownloadSpec("text/csv", chunks=ebm_exports.samples_csv),
    "samples.jsonl": DownloadSpec("application/x-ndjson", chunks=ebm_exports.samples_jsonl),
}
CATALOGUE = (
    "manifest.json", "items.csv", "items.jsonl", "ratings_table.csv", "ratings_table.tex",
    "ratings.csv", "ratings.jsonl", "ebm.csv", "ebm.tex", "ebm_gap.svg", "ebm_gap.png",
    "samples.csv", "samples.jsonl",
    "annotators.csv", "forced_samples.csv", "forced_samples.tex",
)  # fmt: skip
