"""A study's downloads: one catalogue for the dashboard and the API, audited here.

Every download is recorded in the audit log (`export`) by whoever asked for it, a
researcher on the dashboard or through the API. Judgments, ratings and items are streamed
by the web layer from a session of its own (`Download.chunks`); the rest is rendered here.
A ratings study's downloads on a next-word study, or a next-word study's on a ratings study,
are not in its catalogue (`NoSuchDownload`: a 404), rather than an empty file.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.audit.service import Actor, record_by
from app.models import Study
from app.results import catalog, exports, forced, participants
from app.results.schemas import ResultQuery
from app.studytypes.base import Chunks, DownloadSpec
from app.studytypes.registry import STUDY_TYPES, study_type_of


def _manifest(session: Session, study: Study, query: ResultQuery, paper: bool) -> str:
    return catalog.manifest(session, study).model_dump_json(indent=2)


# Every type's downloads besides its own: the provenance manifest and the items.
SHARED = {
    "manifest.json": DownloadSpec("application/json", render=_manifest),
    "items.csv": DownloadSpec("text/csv", chunks=exports.items_csv),
    "items.jsonl": DownloadSpec("application/x-ndjson", chunks=exports.items_jsonl),
    "annotators.csv": DownloadSpec("text/csv", chunks=participants.annotators_csv),
    # Forced-prefix samples (issue 34): the paper's tables, whatever the study's type.
    "forced_samples.csv": DownloadSpec("text/csv", render=forced.forced_samples_csv),
    "forced_samples.tex": DownloadSpec("application/x-tex", render=forced.forced_samples_tex),
}
SPECS: dict[str, DownloadSpec] = {
    **SHARED,
    **{name: spec for plugin in STUDY_TYPES.values() for name, spec in plugin.downloads.items()},
}
MEDIA_TYPES = {name: spec.media_type for name, spec in SPECS.items()}


def catalogue(study: Study) -> list[str]:
    """The downloads of `study`, in the order the pages list them: its type's own (a
    next-word study's figures, diagnostics and judgments; a ratings study's ratings, EB-M
    and samples), the manifest, the items and the annotators for both."""
    return list(study_type_of(study).catalogue)


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
    if name not in SPECS:
        raise NoSuchDownload(name)
    plugin = study_type_of(study)
    if name not in plugin.catalogue:
        raise NoSuchDownload(name, plugin.refusal(study, name))
    record_by(session, by, "export", study=study, what=name, options=query.model_dump())
    spec = SPECS[name]
    filename = f"{study.slug}-{name}"
    if spec.chunks is not None:
        return Download(name, spec.media_type, filename, chunks=spec.chunks)
    assert spec.render is not None
    body = spec.render(session, study, query, paper)
    return Download(name, spec.media_type, filename, body=body)
