"""A study's downloads: one catalogue for the dashboard and the API, audited here.

Every download is recorded in the audit log (`export`) by whoever asked for it, a
researcher on the dashboard or through the API. Judgments, ratings and items are streamed
by the web layer from a session of its own (`Download.chunks`); the rest is rendered here.
A ratings study's downloads on a next-word study, or a next-word study's on a ratings study,
are not in its catalogue (`NoSuchDownload`: a 404), rather than an empty file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.orm import Session

from app.audit.service import Actor, record_by
from app.models import Study
from app.results import (
    catalog,
    diagnostics,
    ebm,
    ebm_exports,
    exports,
    ratings,
    ratings_exports,
    service,
)
from app.results.plot import diagnostics_plot, results_plot
from app.results.schemas import ResultQuery

Chunks = Callable[[Session, Study], Iterator[str]]

MEDIA_TYPES = {
    "results.csv": "text/csv",
    "results.tex": "application/x-tex",
    "plot.svg": "image/svg+xml",
    "plot.png": "image/png",
    "manifest.json": "application/json",
    "diagnostics.csv": "text/csv",
    "diagnostics.svg": "image/svg+xml",
    "diagnostics.png": "image/png",
    "judgments.csv": "text/csv",
    "judgments.jsonl": "application/x-ndjson",
    "items.csv": "text/csv",
    "items.jsonl": "application/x-ndjson",
    # Ratings studies only (RATINGS_ONLY): the ratings' Table 3 and every rating, the stored
    # EB-M scores and the prefix-switching samples.
    "ratings_table.csv": "text/csv",
    "ratings_table.tex": "application/x-tex",
    "ratings.csv": "text/csv",
    "ratings.jsonl": "application/x-ndjson",
    "ebm.csv": "text/csv",
    "ebm.tex": "application/x-tex",
    "samples.csv": "text/csv",
    "samples.jsonl": "application/x-ndjson",
}
STREAMED: dict[str, Chunks] = {
    "judgments.csv": exports.judgments_csv,
    "judgments.jsonl": exports.judgments_jsonl,
    "items.csv": exports.items_csv,
    "items.jsonl": exports.items_jsonl,
    "samples.csv": ebm_exports.samples_csv,
    "samples.jsonl": ebm_exports.samples_jsonl,
    "ratings.csv": ratings_exports.ratings_csv,
    "ratings.jsonl": ratings_exports.ratings_jsonl,
}
RATINGS_ONLY_ORDER = (
    "ratings_table.csv", "ratings_table.tex", "ratings.csv", "ratings.jsonl", "ebm.csv",
    "ebm.tex", "samples.csv", "samples.jsonl",
)  # fmt: skip
RATINGS_ONLY = frozenset(RATINGS_ONLY_ORDER)
# A ratings study has no judgments: no next-word figures, plots, diagnostics or judgments.
NEXTWORD_ONLY = frozenset(
    {"results.csv", "results.tex", "plot.svg", "plot.png", "diagnostics.csv"}
    | {"diagnostics.svg", "diagnostics.png", "judgments.csv", "judgments.jsonl"}
)


def catalogue(study: Study) -> list[str]:
    """The downloads of `study`: a ratings study's (its ratings, EB-M, samples) or a
    next-word study's (its judgments' figures), the manifest and the items for both."""
    if ebm.is_ratings(study):
        return [n for n in MEDIA_TYPES if n not in NEXTWORD_ONLY]
    return [n for n in MEDIA_TYPES if n not in RATINGS_ONLY]


class NoSuchDownload(LookupError):
    """The name is not in the catalogue of the study (the message says why)."""

    def __init__(self, name: str, why: str = "There is no such download.") -> None:
        super().__init__(name)
        self.message = why


@dataclass(frozen=True)
class Download:
    name: str
    media_type: str
    filename: str
    body: str | bytes | None = None  # rendered now
    chunks: Chunks | None = None  # streamed by the caller, in a session of its own


def download(
    session: Session,
    study: Study,
    name: str,
    query: ResultQuery,
    *,
    by: Actor | None,
    paper: bool = False,
) -> Download:
    """`name` of `study` (see `MEDIA_TYPES`), recorded as an export by `by`."""
    if name not in MEDIA_TYPES:
        raise NoSuchDownload(name)
    if name not in catalogue(study):
        kind = "a ratings" if ebm.is_ratings(study) else "a next-word"
        raise NoSuchDownload(name, f"{study.slug} is {kind} study: it has no {name}.")
    record_by(session, by, "export", study=study, what=name, options=query.model_dump())
    spec = Download(name, MEDIA_TYPES[name], f"{study.slug}-{name}")
    if name in STREAMED:
        return Download(spec.name, spec.media_type, spec.filename, chunks=STREAMED[name])
    if name == "manifest.json":
        body: str | bytes = catalog.manifest(session, study).model_dump_json(indent=2)
    elif name == "ebm.csv":
        body = ebm_exports.ebm_csv(study.slug, ebm.stored_ebm(session, study))
    elif name == "ebm.tex":
        stored = ebm.stored_ebm(session, study)
        body = ebm_exports.ebm_latex(study.slug, stored, catalog.task_label(study))
    elif name.startswith("ratings_table."):
        res = ratings.ratings_document(session, study, query)
        if name == "ratings_table.csv":
            body = ratings_exports.ratings_table_csv(res)
        else:
            body = ratings_exports.ratings_latex(res, catalog.task_label(study), paper=paper)
    elif name.startswith("diagnostics."):
        diag = diagnostics.study_diagnostics(session, study, query)
        if name == "diagnostics.csv":
            body = diagnostics.diagnostics_csv(diag)
        else:
            body = diagnostics_plot(diag, "svg" if name.endswith("svg") else "png")
    else:
        res = service.study_results(session, study, query)
        if name.startswith("plot."):
            fmt: Literal["svg", "png"] = "svg" if name.endswith("svg") else "png"
            body = results_plot(res, fmt)
        elif name == "results.tex":
            body = exports.results_latex(res, catalog.task_label(study), paper=paper)
        else:
            body = exports.results_csv(res)
    return Download(spec.name, spec.media_type, spec.filename, body=body)
