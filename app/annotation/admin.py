"""The researcher's side of annotators: invite links, blocking, caps. Services flush only.

Blocking stops an annotator's future work at once (`next_assignment` checks
`blocked`); `exclude_past` additionally drops their judgments from the results
under the study's `blocked` exclusion rule.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.annotation.service import AnnotationError, create_local_annotators, invite_token
from app.models import Annotator, Channel, Study, utcnow

MAX_BATCH = 1000


def get_annotator(session: Session, study: Study, annotator_id: int) -> Annotator | None:
    annotator = session.get(Annotator, annotator_id)
    return annotator if annotator is not None and annotator.study_id == study.id else None


def invite(session: Session, study: Study, count: int, label: str | None) -> list[Annotator]:
    if not 1 <= count <= MAX_BATCH:
        raise AnnotationError(f"invite between 1 and {MAX_BATCH} annotators at a time")
    return create_local_annotators(session, study, count, (label or "").strip() or None)


def invite_link(base_url: str, secret_key: str, annotator: Annotator) -> str | None:
    """The annotator's link (local annotators only; crowd workers come through their site)."""
    if annotator.channel is not Channel.local or annotator.invite_nonce is None:
        return None
    return f"{base_url.rstrip('/')}/a/{invite_token(secret_key, annotator)}"


def links_csv(base_url: str, secret_key: str, annotators: Iterable[Annotator]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["label", "link"])
    for a in annotators:
        link = invite_link(base_url, secret_key, a)
        if link:
            writer.writerow([a.label or "", link])
    return out.getvalue()


def local_annotators(session: Session, study: Study) -> list[Annotator]:
    return list(
        session.scalars(
            select(Annotator)
            .where(Annotator.study_id == study.id, Annotator.channel == Channel.local)
            .order_by(Annotator.id)
        )
    )


def block(session: Session, annotator: Annotator, *, reason: str, exclude_past: bool) -> None:
    annotator.blocked = True
    annotator.blocked_at = utcnow()
    annotator.blocked_reason = reason.strip()[:2000] or None
    annotator.exclude_past = exclude_past
    session.flush()


def unblock(session: Session, annotator: Annotator) -> None:
    """Let them work again; their past judgments count again."""
    annotator.blocked = False
    annotator.blocked_at = None
    annotator.blocked_reason = None
    annotator.exclude_past = False
    session.flush()


def set_cap(session: Session, annotator: Annotator, cap: int | None) -> None:
    """Override the study's per-annotator cap (None: back to the study's)."""
    if cap is not None and cap < 0:
        raise AnnotationError("a cap cannot be negative")
    annotator.hit_cap = cap
    session.flush()
