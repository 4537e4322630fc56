"""The annotators' export (issue 33): one row per annotator of a study with what the
participant gave besides their answers. Every type's studies have it (`annotators.csv`).

Columns: ``study``, ``annotator_id``, ``annotator_label``, ``channel``, ``worker_id``,
``simulated``, ``annotator_blocked``; ``consented_at`` (when they accepted the study's
consent text, UTC ISO 8601; empty: not asked or not given); ``hits_submitted``;
``study_comment`` and ``commented_at`` (their end-of-study comment); ``hit_comments`` (JSON:
``[{"hit": index, "comment": text}]``); page signals summed over their HITs, where the
page's script ran: ``page_items`` (items with signals recorded), ``page_away_items`` (of
those, items they left the page on), ``page_away`` (times), ``page_away_s`` (seconds).
Comments are untrusted text: neutralised as every CSV cell is (`app.results.exports`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.annotation.participants import participant_sides
from app.models import Annotator, Assignment, AssignmentStatus, Study
from app.results.exports import csv_chunks, iso_time

ANNOTATOR_FIELDS = [
    "study", "annotator_id", "annotator_label", "channel", "worker_id", "simulated",
    "annotator_blocked", "consented_at", "hits_submitted", "study_comment", "commented_at",
    "hit_comments", "page_items", "page_away_items", "page_away", "page_away_s",
]  # fmt: skip


def _rows(session: Session, study: Study) -> Iterator[list[dict[str, Any]]]:
    submitted = dict(
        session.execute(
            select(Assignment.annotator_id, func.count())
            .join(Annotator, Annotator.id == Assignment.annotator_id)
            .where(Annotator.study_id == study.id)
            .where(Assignment.status == AssignmentStatus.submitted)
            .group_by(Assignment.annotator_id)
        ).all()
    )
    sides = participant_sides(session, study.id)
    batch = []
    for a in session.scalars(
        select(Annotator).where(Annotator.study_id == study.id).order_by(Annotator.id)
    ):
        side = sides.get(a.id)
        signals = side.signals if side else {}
        batch.append(
            {
                "study": study.slug,
                "annotator_id": a.id,
                "annotator_label": a.label,
                "channel": a.channel.value,
                "worker_id": None if a.invited else a.external_id,
                "simulated": bool(a.simulated),
                "annotator_blocked": bool(a.blocked),
                "consented_at": iso_time(a.consented_at),
                "hits_submitted": int(submitted.get(a.id, 0)),
                "study_comment": a.comment,
                "commented_at": iso_time(a.commented_at),
                # JSON text (a cell that starts with "[": never a formula).
                "hit_comments": json.dumps(
                    [{"hit": i, "comment": text} for i, text in (side.comments if side else [])],
                    ensure_ascii=False,
                ),
                "page_items": signals.get("items"),
                "page_away_items": signals.get("away_items"),
                "page_away": signals.get("times"),
                "page_away_s": signals.get("seconds"),
            }
        )
    yield batch


def annotators_csv(session: Session, study: Study) -> Iterator[str]:
    """The study's annotators as CSV text chunks."""
    return csv_chunks(ANNOTATOR_FIELDS, _rows(session, study))
