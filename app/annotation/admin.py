"""The researcher's side of annotators: invite links, blocking, caps. Services flush only;
each records what it did in the audit log, by whom (`by`: a researcher, or the CLI).

Blocking stops an annotator's future work at once (`next_assignment` checks
`blocked`); `exclude_past` additionally drops their judgments from the results
under the study's `blocked` exclusion rule.

Revoking an invite link clears the annotator's `invite_nonce` (the link then answers
"This link is no longer valid"); re-issuing sets a new nonce, so the person gets a new
link and the old one stays dead. Their judgments are kept either way.
"""

from __future__ import annotations

import io
import secrets
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.annotation.errors import AnnotationError
from app.annotation.identities import create_local_annotators, invite_token
from app.audit.service import Actor, record_by
from app.csvfiles import CsvWriter
from app.models import Annotator, Channel, Study, utcnow

MAX_BATCH = 1000


def get_annotator(session: Session, study: Study, annotator_id: int) -> Annotator | None:
    annotator = session.get(Annotator, annotator_id)
    return annotator if annotator is not None and annotator.study_id == study.id else None


def invite(
    session: Session, study: Study, count: int, label: str | None, *, by: Actor | None = None
) -> list[Annotator]:
    if not 1 <= count <= MAX_BATCH:
        raise AnnotationError(f"invite between 1 and {MAX_BATCH} annotators at a time")
    made = create_local_annotators(session, study, count, (label or "").strip() or None)
    record_by(session, by, "annotators_invited", study=study, count=len(made))
    return made


def _record(session: Session, by: Actor | None, action: str, a: Annotator, **detail) -> None:
    study = session.get(Study, a.study_id)
    record_by(session, by, action, study=study, annotator=a.label or a.id, **detail)


def invite_link(base_url: str, secret_key: str, annotator: Annotator) -> str | None:
    """The annotator's link (local annotators only; crowd workers come through their site).
    A simulated annotator's link is its simulator's alone (`app.simulate.http`), never
    shown or exported: whoever followed it would work as a simulated crowd."""
    if (
        annotator.channel is not Channel.local
        or annotator.invite_nonce is None
        or annotator.simulated
    ):
        return None
    return f"{base_url.rstrip('/')}/a/{invite_token(secret_key, annotator)}"


def _local(annotator: Annotator) -> None:
    if annotator.channel is not Channel.local:
        raise AnnotationError(
            "Only invited annotators have links; a crowd worker is blocked instead.", 400
        )


def revoke_invite(session: Session, annotator: Annotator, *, by: Actor | None = None) -> None:
    """Make the annotator's link stop working (a no-op when it already does not)."""
    _local(annotator)
    if annotator.invite_nonce is not None:
        annotator.invite_nonce = None
        annotator.revoked_at = utcnow()
    session.flush()
    _record(session, by, "invite_revoked", annotator)


def reissue_invite(session: Session, annotator: Annotator, *, by: Actor | None = None) -> None:
    """A new link for the same annotator (their work so far stays theirs); the old link,
    revoked or not, stops working. Not for a simulated annotator, whose link dies with
    its run."""
    _local(annotator)
    if annotator.simulated:
        raise AnnotationError("A simulated annotator's link is not given to anyone.", 409)
    annotator.invite_nonce = secrets.token_urlsafe(16)
    annotator.revoked_at = None
    session.flush()
    _record(session, by, "invite_reissued", annotator)


def find_annotator(session: Session, study: Study, ref: str) -> Annotator:
    """An annotator of `study` by id or by label (for the CLI); the label must be unique."""
    ref = ref.strip()
    # ASCII digits only, within an INTEGER key: `"²".isdigit()` is true and int() refuses it.
    if ref.isascii() and ref.isdigit() and len(ref) <= 9:
        found = get_annotator(session, study, int(ref))
        if found is not None:
            return found
    named = session.scalars(
        select(Annotator).where(Annotator.study_id == study.id, Annotator.label == ref)
    ).all()
    if len(named) == 1:
        return named[0]
    if named:
        ids = ", ".join(str(a.id) for a in named)
        raise AnnotationError(f"{len(named)} annotators are called {ref!r} (ids {ids}): give one")
    raise AnnotationError(f"{study.slug} has no annotator {ref!r} (give an id or a label)", 404)


def links_csv(base_url: str, secret_key: str, annotators: Iterable[Annotator]) -> str:
    out = io.StringIO()
    writer = CsvWriter(out, lineterminator="\r\n")  # a label is the researcher's text
    writer.writerow(["label", "link"])
    for a in annotators:
        link = invite_link(base_url, secret_key, a)
        if link:
            writer.writerow([a.label or "", link])
    return out.getvalue()


def export_links(
    session: Session, study: Study, base_url: str, secret_key: str, *, by: Actor | None = None
) -> str:
    """Every invited annotator's link as CSV; links are credentials, so the export is logged."""
    table = links_csv(base_url, secret_key, local_annotators(session, study))
    record_by(session, by, "export", study=study, what="invite links")
    return table


def local_annotators(session: Session, study: Study) -> list[Annotator]:
    """The study's invited lab members (a simulated crowd's annotators are not)."""
    return list(
        session.scalars(
            select(Annotator)
            .where(
                Annotator.study_id == study.id,
                Annotator.channel == Channel.local,
                Annotator.simulated.is_(False),
            )
            .order_by(Annotator.id)
        )
    )


def block(
    session: Session,
    annotator: Annotator,
    *,
    reason: str,
    exclude_past: bool,
    by: Actor | None = None,
) -> None:
    annotator.blocked = True
    annotator.blocked_at = utcnow()
    annotator.blocked_reason = reason.strip()[:2000] or None
    annotator.exclude_past = exclude_past
    session.flush()
    _record(
        session,
        by,
        "annotator_blocked",
        annotator,
        exclude_past=exclude_past,
        reason=reason.strip()[:200],
    )


def unblock(session: Session, annotator: Annotator, *, by: Actor | None = None) -> None:
    """Let them work again; their past judgments count again."""
    annotator.blocked = False
    annotator.blocked_at = None
    annotator.blocked_reason = None
    annotator.exclude_past = False
    session.flush()
    _record(session, by, "annotator_unblocked", annotator)


def set_cap(
    session: Session, annotator: Annotator, cap: int | None, *, by: Actor | None = None
) -> None:
    """Override the study's per-annotator cap (None: back to the study's)."""
    if cap is not None and cap < 0:
        raise AnnotationError("a cap cannot be negative")
    annotator.hit_cap = cap
    session.flush()
    _record(session, by, "annotator_cap_changed", annotator, cap=annotator.hit_cap)
