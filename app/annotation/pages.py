"""One function per annotator page action: everything its template needs, from one call.

The web layer parses a request, calls one of these in the request's transaction and
renders what it returns; rendering reads only what is returned here, and writes nothing.
Identities, leases, submissions and a HIT's content are their own modules; this one
strings them together in the order each page needs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy.orm import Session

from app.annotation.content import hit_content
from app.annotation.errors import AnnotationError, InvalidAnswers
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
from app.annotation.queries import SERVED, STORED_ANSWERS
from app.annotation.ratings import (
    RatingRefused,
    point,
    rate,
    rating_from_form,
    rating_step,
    stored_ratings,
)
from app.annotation.schemas import (
    AnnotatorRef,
    HitPage,
    InviteRef,
    Lease,
    MturkDone,
    PageData,
    Rated,
    Sent,
    StudyRef,
    Submission,
    Work,
    WorkStatus,
)
from app.annotation.submissions import answers_from_form, submit
from app.models import Channel, Study, StudyType, utcnow

# -- invite and Prolific links -------------------------------------------------------------


def open_invite(session: Session, ref: InviteRef) -> PageData:
    """An invite (or Prolific) link's page: the annotator's HIT, resumed or newly claimed."""
    now = utcnow()
    annotator = annotator_for_invite(session, ref, now)
    work = next_assignment(
        session, annotator, now=now, external_session_id=ref.session_id, serve=True
    )
    return _page(session, annotator, work, now)


def send_invite(
    session: Session, ref: InviteRef, form: Mapping[str, str]
) -> Sent | Rated | PageData:
    """A posted HIT of an invite link: stored, or (incomplete, a bad option) shown again.
    Ratings studies: one step's rating, stored (`Rated`) or refused with its step again."""
    annotator = annotator_for_invite(session, ref)
    if _rates(annotator):
        return _rate(session, annotator, form, external_session_id=ref.session_id)
    result = _submit(session, annotator, form, external_session_id=ref.session_id)
    if isinstance(result, PageData):
        return result
    return Sent(result, _kept_page(session, result))


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


def send_mturk(
    session: Session, slug: str, form: Mapping[str, str]
) -> MturkDone | Rated | PageData:
    """A posted MTurk HIT: stored (then posted on to MTurk by the browser), or shown again.
    Ratings studies: one step's rating (`Rated`); the last one's assignment is done."""
    study = study_by_slug(session, slug)
    channel_settings(study, Channel.mturk)
    external = platform_id(form.get("assignmentId"), "assignment id")
    annotator = crowd_annotator(session, study, Channel.mturk, form.get("workerId", ""))
    if _rates(annotator):
        rated = _rate(session, annotator, form, mturk=study, external_assignment_id=external)
        if isinstance(rated, PageData):
            return rated
        if rated.assignment.external_assignment_id != external:
            raise AnnotationError("The MTurk assignment does not match this HIT.", 400)
        return _mturk_done(session, study, rated.assignment) if rated.completed else rated
    result = _submit(session, annotator, form, mturk=study, external_assignment_id=external)
    if isinstance(result, PageData):
        return result
    if result.assignment.external_assignment_id != external:
        raise AnnotationError("The MTurk assignment does not match this HIT.", 400)
    return _mturk_done(session, study, result.assignment, _kept_page(session, result))


def _mturk_done(
    session: Session, study: Study, assignment: Lease, kept: HitPage | None = None
) -> MturkDone:
    origin = check_submit_to(study, assignment.submit_to or "")
    if study.study_type is StudyType.ratings:
        ratings = {
            position: (point(r.quality), None if r.consistency is None else point(r.consistency))
            for position, r in stored_ratings(session, assignment.id).items()
        }
        return MturkDone(assignment, origin, ratings=ratings)
    # Read back, not taken from the form: after a repeat that differed, the kept ones.
    slots = dict(session.execute(STORED_ANSWERS, {"assignment_id": assignment.id}).all())
    return MturkDone(assignment, origin, kept, slots)


# -- the HIT as shown -------------------------------------------------------------------


def _rates(annotator: AnnotatorRef) -> bool:
    """Does the annotator's study collect ratings (read with the annotator's lock)?"""
    return annotator.study.study_type is StudyType.ratings


def _rate(
    session: Session,
    annotator: AnnotatorRef,
    form: Mapping[str, str],
    *,
    mturk: Study | None = None,
    **lease,
) -> Rated | PageData:
    """Store a posted step of a ratings HIT; a refused one gets the annotator's page again,
    with the reason, under the refusal's 4xx (`lease`: as `next_assignment` finds it)."""
    post = rating_from_form(form)
    try:
        return rate(session, annotator, post)
    except RatingRefused as exc:
        return _refused(session, annotator, exc, form, mturk, lease)


def _submit(
    session: Session,
    annotator: AnnotatorRef,
    form: Mapping[str, str],
    *,
    mturk: Study | None = None,
    **lease,
) -> Submission | PageData:
    """Store the form's answers; an incomplete form (or one with a bad option) gets the
    annotator's page again instead (`lease`: as `next_assignment` finds it)."""
    answers, times = answers_from_form(form)
    try:
        return submit(session, annotator, form.get("assignment", ""), answers, times)
    except InvalidAnswers as exc:
        return _refused(session, annotator, exc, form, mturk, lease)


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
    """`work`'s page: its HIT, recorded as served, when one is assigned. `refused`: the
    refused form, whose answers are shown again on the HIT they were given for only (a
    lapsed lease may have been replaced by another HIT, whose texts they do not belong to).
    """
    data = PageData(annotator, work)
    lease = work.assignment
    if work.status is WorkStatus.assigned and lease is not None:
        study = study_for(session, annotator)
        if study.study_type is StudyType.ratings:
            _served(session, lease, now)
            data.rating = rating_step(session, lease, study, first_hit=work.done == 0)
        else:
            data.page = _hit_page(session, lease, study, now)
    if refused is not None:
        exc, form = refused
        data.error = exc.message
        data.status_code = exc.status_code
        if (
            isinstance(exc, InvalidAnswers)
            and data.page is not None
            and lease.public_id == form.get("assignment")
        ):
            data.page.answers = exc.answers
    return data


def _served(session: Session, lease: Lease, now: datetime) -> None:
    """Record when the HIT's page was first shown (the time check without JavaScript)."""
    if lease.page_served_at is None:
        lease.page_served_at = now
        session.execute(SERVED, {"assignment_id": lease.id, "now": now})


def _hit_page(session: Session, lease: Lease, study: StudyRef, now: datetime) -> HitPage:
    """The HIT as shown: contexts and their words in the stored screen order."""
    _served(session, lease, now)
    return HitPage(
        public_id=lease.public_id,
        positions=list(hit_content(session, lease.hit_id).positions),
        task=str(study.task),
        expires_at_iso=lease.expires_at.isoformat(timespec="seconds"),
    )


def _kept_page(session: Session, result: Submission) -> HitPage | None:
    """A submitted HIT with the answers that were kept, after a repeat that differed."""
    if not result.kept:
        return None
    lease = result.assignment
    return HitPage(
        public_id=lease.public_id,
        positions=list(hit_content(session, lease.hit_id).positions),
        task="",
        expires_at_iso=lease.expires_at.isoformat(timespec="seconds"),
        answers=dict(result.kept),
    )
