"""One function per annotator page action: everything its template needs, from one call.

The web layer parses a request, calls one of these in the request's transaction and
renders what it returns; rendering reads only what is returned here, and writes nothing.
Identities, leases, submissions and a HIT's content are their own modules; this one
strings them together in the order each page needs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.annotation.errors import AnnotationError, FormRefused
from app.annotation.identities import (
    PREVIEW_ASSIGNMENT,
    Enrolment,
    annotator_for_invite,
    channel_settings,
    check_prolific_entry,
    check_submit_to,
    crowd_annotator,
    invite_token,
    platform_id,
    study_by_slug,
)
from app.annotation.leases import next_assignment, return_assignment, study_for
from app.annotation.participants import (
    check_asks_consent,
    consent_text,
    end_comment,
    extras_from,
    give_consent,
    require_consent,
    store_extras,
)
from app.annotation.queries import ANNOTATOR_BY_PLATFORM_ID
from app.annotation.schemas import (
    AnnotatorRef,
    InviteRef,
    Lease,
    MturkDone,
    PageData,
    Sent,
    Work,
    WorkStatus,
)
from app.models import Channel, Study, utcnow
from app.studytypes.registry import study_type_of

# -- invite and Prolific links -------------------------------------------------------------


def open_invite(session: Session, ref: InviteRef) -> PageData:
    """An invite (or Prolific) link's page: the annotator's HIT, resumed or newly claimed
    (`ConsentNeeded` before the study's consent text is accepted: nothing is claimed)."""
    now = utcnow()
    annotator = annotator_for_invite(session, ref, now)
    require_consent(annotator)
    work = next_assignment(
        session, annotator, now=now, external_session_id=ref.session_id, serve=True
    )
    return _page(session, annotator, work, now)


def send_invite(session: Session, ref: InviteRef, form: Mapping[str, str]) -> Sent | PageData:
    """A posted page of an invite link (a next-word HIT, or one step of a ratings HIT):
    stored, or (incomplete, a bad option, a step out of order) shown again."""
    annotator = annotator_for_invite(session, ref)
    return _send(session, annotator, form, external_session_id=ref.session_id)


@dataclass(frozen=True)
class ConsentView:
    """The consent page: the study's title and the researcher's text (untrusted: escaped)."""

    title: str
    text: str
    given: bool


def _consent_view(session: Session, annotator: AnnotatorRef) -> ConsentView:
    title = session.scalar(select(Study.title).where(Study.id == annotator.study_id)) or ""
    return ConsentView(title, consent_text(annotator.study), annotator.consented_at is not None)


def invite_consent(session: Session, ref: InviteRef) -> ConsentView:
    """The consent page of an invite (or Prolific) link."""
    annotator = annotator_for_invite(session, ref)
    check_asks_consent(annotator)
    return _consent_view(session, annotator)


def accept_invite_consent(session: Session, ref: InviteRef, form: Mapping[str, str]) -> None:
    """The consent form posted (`give_consent`: the ticked box, or a 400)."""
    give_consent(session, annotator_for_invite(session, ref), form)


def invite_comment(session: Session, ref: InviteRef, form: Mapping[str, str]) -> bool:
    """The end-of-study comment of an invite (or Prolific) link's participant."""
    return end_comment(session, annotator_for_invite(session, ref), form)


def return_invite(session: Session, ref: InviteRef, public_id: str) -> None:
    """Give the link's leased HIT back (see `return_assignment`)."""
    return_assignment(session, annotator_for_invite(session, ref), public_id)


def enter_prolific(
    session: Session, secret_key: str, slug: str, params: Mapping[str, str], enrolment: Enrolment
) -> str:
    """A Prolific participant's signed link token (their identity made on the first visit).

    Call after `check_prolific_key`: the entry's key is checked before anything is looked up.
    """
    study = study_by_slug(session, slug)
    participant, session_id = check_prolific_entry(study, params)
    annotator = crowd_annotator(session, study, Channel.prolific, participant, enrolment=enrolment)
    return invite_token(secret_key, annotator, session_id)


# -- MTurk ------------------------------------------------------------------------------


def open_mturk(
    session: Session,
    slug: str,
    assignment_id: str,
    hit_id: str,
    worker_id: str,
    submit_to: str,
    enrolment: Enrolment,
) -> Study | MturkDone | PageData:
    """The ExternalQuestion page: the study for a preview (no assignment yet), the assignment
    when it was already stored, else the worker's HIT for that assignment."""
    study = study_by_slug(session, slug)
    channel_settings(study, Channel.mturk)
    if not assignment_id or assignment_id == PREVIEW_ASSIGNMENT:
        return study
    assignment_id = platform_id(assignment_id, "assignment id")
    hit_id = platform_id(hit_id, "HIT id", required=False)
    origin = check_submit_to(study, submit_to)
    annotator = crowd_annotator(session, study, Channel.mturk, worker_id, enrolment=enrolment)
    require_consent(annotator)
    now = utcnow()
    work = next_assignment(
        session,
        annotator,
        now=now,
        external_assignment_id=assignment_id,
        external_hit_id=hit_id,
        submit_to=submit_to,
        serve=True,
    )
    if work.assignment is not None and work.assignment.submitted_at is not None:
        return _mturk_done(session, study, work.assignment)
    data = _page(session, annotator, work, now)
    data.origin = origin
    return data


def send_mturk(session: Session, slug: str, form: Mapping[str, str]) -> MturkDone | Sent | PageData:
    """A posted MTurk page: stored (the HIT's last step: then posted on to MTurk by the
    browser; an earlier step of a ratings HIT: `Sent`, not completed), or shown again."""
    study = study_by_slug(session, slug)
    channel_settings(study, Channel.mturk)
    external = platform_id(form.get("assignmentId"), "assignment id")
    annotator = crowd_annotator(session, study, Channel.mturk, form.get("workerId", ""))
    sent = _send(session, annotator, form, mturk=study, external_assignment_id=external)
    if isinstance(sent, PageData):
        return sent
    if sent.assignment.external_assignment_id != external:
        raise AnnotationError("The MTurk assignment does not match this HIT.", 400)
    return _mturk_done(session, study, sent.assignment, sent.kept) if sent.completed else sent


def _mturk_worker(
    session: Session, slug: str, params: Mapping[str, str], enrolment: Enrolment | None
) -> AnnotatorRef:
    """The MTurk worker a consent or comment form names (never a preview's)."""
    study = study_by_slug(session, slug)
    channel_settings(study, Channel.mturk)
    assignment_id = params.get("assignmentId", "")
    if not assignment_id or assignment_id == PREVIEW_ASSIGNMENT:
        raise AnnotationError("Accept the HIT on MTurk first.", 400)
    platform_id(assignment_id, "assignment id")
    worker = params.get("workerId", "")
    return crowd_annotator(session, study, Channel.mturk, worker, enrolment=enrolment)


def mturk_consent(
    session: Session, slug: str, params: Mapping[str, str], enrolment: Enrolment
) -> ConsentView:
    """The consent page of an MTurk worker (before their first HIT of the study)."""
    annotator = _mturk_worker(session, slug, params, enrolment)
    check_asks_consent(annotator)
    return _consent_view(session, annotator)


def accept_mturk_consent(
    session: Session, slug: str, form: Mapping[str, str], enrolment: Enrolment
) -> None:
    give_consent(session, _mturk_worker(session, slug, form, enrolment), form)


def mturk_comment(session: Session, slug: str, form: Mapping[str, str]) -> bool:
    """The end-of-study comment of an MTurk worker the study knows (a made-up worker id is
    refused, 404: a comment never makes an identity)."""
    study = study_by_slug(session, slug)
    channel_settings(study, Channel.mturk)
    worker = platform_id(form.get("workerId"))
    key = {"study_id": study.id, "channel": Channel.mturk, "external_id": worker}
    if session.scalar(ANNOTATOR_BY_PLATFORM_ID, key) is None:
        raise AnnotationError("This study does not know this worker.", 404)
    return end_comment(session, _mturk_worker(session, slug, form, None), form)


def _mturk_done(session: Session, study: Study, assignment: Lease, kept: Any = None) -> MturkDone:
    origin = check_submit_to(study, assignment.submit_to or "")
    # Read back, not taken from the form: after a repeat that differed, the kept ones.
    fields = study_type_of(study).pages.mturk_fields(session, assignment)
    return MturkDone(assignment, origin, kept, fields)


# -- the HIT as shown -------------------------------------------------------------------


def _send(
    session: Session,
    annotator: AnnotatorRef,
    form: Mapping[str, str],
    *,
    mturk: Study | None = None,
    **lease,
) -> Sent | PageData:
    """Store a posted page through its study type (`StudyTypePlugin.send`); a refused form
    gets the annotator's page again, with the reason, under the refusal's 4xx (`lease`: as
    `next_assignment` finds it)."""
    require_consent(annotator)  # no consent, no work: a 403 that stores nothing
    extras = extras_from(form)  # a bad comment or page field: 400 before anything is stored
    try:
        sent = study_type_of(annotator.study).pages.send(session, annotator, form)
    except FormRefused as exc:
        return _refused(session, annotator, exc, form, mturk, lease)
    if not sent.repeated:  # a repeat keeps what the first post stored, its extras too
        store_extras(session, annotator.study, sent.assignment, extras, last_step=sent.completed)
    return sent


def _refused(
    session: Session,
    annotator: AnnotatorRef,
    exc: AnnotationError,
    form: Mapping[str, str],
    mturk: Study | None,
    lease: dict,
) -> PageData:
    """The annotator's page again after a refused form, with the reason."""
    now = utcnow()
    work = next_assignment(session, annotator, now=now, serve=True, **lease)
    origin = None
    if mturk is not None and work.assignment is not None:
        # Its forms post to the assignment's turkSubmitTo, checked again. (No assignment:
        # blocked, closed, not open: a message page, with no form to post.)
        origin = check_submit_to(mturk, work.assignment.submit_to or "")
    data = _page(session, annotator, work, now, refused=(exc, form))
    data.origin = origin
    return data


def _page(
    session: Session,
    annotator: AnnotatorRef,
    work: Work,
    now: datetime,
    *,
    refused: tuple[AnnotationError, Mapping[str, str]] | None = None,
) -> PageData:
    """`work`'s page: its HIT as its study type shows it (recorded as served), when one is
    assigned. `refused`: the refused form and why (the type may show its answers again)."""
    data = PageData(annotator, work)
    lease = work.assignment
    if work.status is WorkStatus.assigned and lease is not None:
        study = study_for(session, annotator)
        data.page = study_type_of(study).pages.page(
            session, lease, study, now, first_hit=work.done == 0, refused=refused
        )
    if refused is not None:
        exc, _ = refused
        data.error = exc.message
        data.status_code = exc.status_code
    return data
