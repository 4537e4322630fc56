"""Every prebuilt statement of the annotation package, and the two rules they share.

The hot path (an invite page and its submit) runs SQLAlchemy Core statements built once
here: their cache keys are memoised on the objects, so executing one costs neither
statement construction nor compilation, and the rows come back as plain tuples (no ORM
identity map, no unit of work). The ORM models stay the schema and serve everything else.

Two rules are written once, here, and every statement that needs them is built from them:
`ACTIVE` (an assignment that holds a replica slot and a place in its annotator's cap) and
`slot_counters` (a HIT's counters when its assignments leave `leased`).
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Double,
    Integer,
    String,
    and_,
    bindparam,
    case,
    cast,
    column,
    exists,
    func,
    insert,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY

from app.annotation.schemas import ANNOTATOR_COLUMNS, LEASE_COLUMNS, STUDY_COLUMNS
from app.crowd.registry import by_channel, self_enrolling
from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    Channel,
    CrowdPosting,
    Hit,
    HitPosition,
    Item,
    Judgment,
    Rating,
    Study,
)
from app.models.base import UTCDateTime

annotators = Annotator.__table__
studies = Study.__table__
assignments = Assignment.__table__
hits = Hit.__table__
positions = HitPosition.__table__
items = Item.__table__
judgments = Judgment.__table__
ratings = Rating.__table__
TIME = UTCDateTime()
NOW = bindparam("now", type_=TIME)

_a = assignments.c
_h = hits.c

# -- the two shared rules ---------------------------------------------------------------

# An assignment is active (holds one of its HIT's replica slots and one of its annotator's
# cap) while it is submitted, or leased and unexpired.
ACTIVE = or_(
    _a.status == AssignmentStatus.submitted,
    and_(_a.status == AssignmentStatus.leased, _a.expires_at > NOW),
)


def slot_counters(leaving, submitted: int = 0) -> dict:
    """The SET clause of a HIT whose assignments leave `leased`: the one slot-counter rule.

    `leaving` leases leave (an int, or a bound parameter for a batch; 0 for a late
    submission whose lease had already left) and `submitted` assignments become submitted.
    `next_expiry` stays a lower bound of the remaining leases' expiry (exact again at the
    next claim that finds it stale) and is cleared with the last lease. Run under the HIT's
    row lock, in the transaction that changes the assignments' status.
    """
    values = {}
    if not isinstance(leaving, int) or leaving > 0:
        values["leased_count"] = _h.leased_count - leaving
        values["next_expiry"] = case((_h.leased_count <= leaving, null()), else_=_h.next_expiry)
    if submitted:
        values["submitted_count"] = _h.submitted_count + submitted
    return values


def _hit_update(leaving, submitted: int = 0, *, key: str = "hit_id"):
    counters = slot_counters(leaving, submitted)
    return update(hits).where(_h.id == bindparam(key)).values(**counters)


# {(was leased, submitted): the statement}: an assignment leaves `leased` (returned, expired)
# or is submitted (on time, or late after its lease had already left).
LEAVE = {
    (True, False): _hit_update(1),
    (True, True): _hit_update(1, 1),
    (False, True): _hit_update(0, 1),
}
LEAVE_MANY = _hit_update(bindparam("n"))  # `n` of a HIT's leases expired at once

# -- identities -------------------------------------------------------------------------

ANNOTATOR_COLS = tuple(annotators.c[name] for name in ANNOTATOR_COLUMNS)
STUDY_COLS = tuple(studies.c[name] for name in STUDY_COLUMNS)
N_ANNOTATOR = len(ANNOTATOR_COLS)


def _lock_statements(key):
    """UPDATE the annotator row matching `key` (returning it): one plain, one that also
    returns the study's row (PostgreSQL: UPDATE ... FROM, one statement for both)."""
    plain = update(annotators).where(key).values(last_seen_at=NOW).returning(*ANNOTATOR_COLS)
    with_study = (
        update(annotators)
        .where(key, annotators.c.study_id == studies.c.id)
        .values(last_seen_at=NOW)
        .returning(*ANNOTATOR_COLS, *(c.label(f"study_{c.name}") for c in STUDY_COLS))
    )
    return plain, with_study


# {by link nonce: (plain, with the study)}: invite links name the annotator by their link
# nonce (unique), not by id.
LOCK = {
    False: _lock_statements(annotators.c.id == bindparam("key")),
    True: _lock_statements(annotators.c.invite_nonce == bindparam("key")),
}
STUDY = select(*STUDY_COLS).where(studies.c.id == bindparam("study_id"))
STUDY_BY_SLUG = select(Study).where(Study.slug == bindparam("slug"))
ANNOTATOR_BY_PLATFORM_ID = select(annotators.c.id).where(
    annotators.c.study_id == bindparam("study_id"),
    annotators.c.channel == bindparam("channel"),
    annotators.c.external_id == bindparam("external_id"),
)
SET_NONCE = (
    update(annotators)
    .where(annotators.c.id == bindparam("annotator_id"))
    .values(invite_nonce=bindparam("nonce"))
)
_annotators_since = (
    select(func.count(), func.min(annotators.c.created_at))
    .where(annotators.c.study_id == bindparam("study_id"))
    .where(annotators.c.created_at > bindparam("since", type_=TIME))
)
# Identities arriving over HTTP: invite links are made by the researcher, batch workers by
# an import, so neither counts towards the rate limit on new crowd identities.
RECENT_CROWD = _annotators_since.where(annotators.c.channel.in_(self_enrolling()))
# One bucket per channel: a lab's address that sends both panel participants and MTurk
# workers is limited on each separately.
RECENT_FROM = _annotators_since.where(
    annotators.c.enrolled_from == bindparam("key"), annotators.c.channel == bindparam("channel")
)

# -- leases and claims ------------------------------------------------------------------

LEASE_COLS = tuple(_a[name] for name in LEASE_COLUMNS)


def _annotator_state(by_external: bool):
    """One statement: the annotator's submitted and active counts, plus the leases to resume.

    The counts come from a one-row subquery outer-joined to the assignments a
    request may resume: the annotator's open leases without an external id, in
    lease order; or (MTurk) the assignment with the given external id, whoever holds it.
    """
    counts = (
        select(
            func.coalesce(
                func.sum(case((_a.status == AssignmentStatus.submitted, 1), else_=0)), 0
            ).label("done"),
            func.coalesce(func.sum(case((ACTIVE, 1), else_=0)), 0).label("held"),
        )
        .where(_a.annotator_id == bindparam("annotator_id"))
        .subquery("counts")
    )
    if by_external:
        resumable = _a.external_assignment_id == bindparam("external")
    else:
        resumable = and_(
            _a.annotator_id == bindparam("annotator_id"),
            _a.status == AssignmentStatus.leased,
            _a.external_assignment_id.is_(None),
        )
    return (
        select(counts.c.done, counts.c.held, *LEASE_COLS)
        .select_from(counts)
        .outerjoin(assignments, resumable)
        .order_by(_a.leased_at)
    )


STATE = {False: _annotator_state(False), True: _annotator_state(True)}  # by external id
# The study's posting on the invite links' platform (`ebc crowd expire --provider local`)
# is expired: invite links take no new work through it.
_postings = CrowdPosting.__table__
LOCAL_CLOSED = select(
    exists().where(
        _postings.c.study_id == bindparam("study_id"),
        _postings.c.provider == by_channel(Channel.local).name,
        _postings.c.status == "expired",
    )
)
# Conditional: `expire_leases` (not under the annotator's lock) may have expired it first,
# and its slot must be given back once only.
EXPIRE_ONE = (
    update(assignments)
    .where(_a.id == bindparam("assignment_id"), _a.status == AssignmentStatus.leased)
    .values(status=AssignmentStatus.expired)
)
EXPIRE_LAPSED = (
    update(assignments)
    .where(
        _a.hit_id.in_(select(_h.id).where(_h.study_id == bindparam("study_id"))),
        _a.status == AssignmentStatus.leased,
        _a.expires_at <= NOW,
    )
    .values(status=AssignmentStatus.expired)
    .returning(_a.hit_id)
)
NEW_LEASE = insert(assignments).returning(_a.id)
SLOTS_BY_LENGTH = (
    select(_h.length, func.sum(_h.replicas))
    .where(_h.study_id == bindparam("study_id"))
    .group_by(_h.length)
)
MINE_BY_LENGTH = (
    select(_h.length, func.count())
    .join(assignments, _a.hit_id == _h.id)
    .where(_a.annotator_id == bindparam("annotator_id"), ACTIVE)
    .group_by(_h.length)
)


def candidates(lengths: list[int] | None, seen: list[int]):
    """HITs that may have a slot for the annotator, fewest submitted replicas first.

    By the counters a HIT has a free slot, or a lease that may have lapsed
    (`next_expiry` passed); the annotator never had it. A walk of `ix_hits_claim`.
    """
    c = hits.alias("candidate").c
    mine = exists().where(_a.hit_id == c.id, _a.annotator_id == bindparam("annotator_id"))
    query = select(c.id).where(
        c.study_id == bindparam("p_study"),
        or_(c.leased_count + c.submitted_count < c.replicas, c.next_expiry <= NOW),
        ~mine,
    )
    if lengths is not None:
        query = query.where(c.length.in_(lengths))
    if seen:
        query = query.where(c.id.not_in(seen))
    return query.order_by(c.submitted_count, c.index).limit(1)


def claim_statement(candidate):
    """Lock the first unlocked candidate and count a lease on it, in one statement."""
    expires_at = bindparam("expires_at", type_=TIME)
    return (
        update(hits)
        .where(_h.id == candidate.with_for_update(skip_locked=True).scalar_subquery())
        .values(
            leased_count=_h.leased_count + 1,
            next_expiry=case(
                (or_(_h.next_expiry.is_(None), _h.next_expiry > expires_at), expires_at),
                else_=_h.next_expiry,
            ),
        )
        .returning(_h.id, _h.leased_count, _h.submitted_count, _h.replicas)
    )


PLAIN = candidates(None, [])
CLAIM = claim_statement(PLAIN)
RECOUNT = select(
    func.coalesce(func.sum(case((ACTIVE, 1), else_=0)), 0),
    func.min(case((_a.status == AssignmentStatus.leased, _a.expires_at))),
).where(_a.hit_id == bindparam("hit_id"))
UNCLAIM = (
    update(hits)
    .where(_h.id == bindparam("hit_id"))
    .values(leased_count=_h.leased_count - 1, next_expiry=bindparam("floor", type_=TIME))
)
OWN = select(*LEASE_COLS).where(_a.public_id == bindparam("public_id"))
OWN_LOCKED = OWN.with_for_update()
RETURN = (
    update(assignments)
    .where(_a.id == bindparam("assignment_id"))
    .values(status=AssignmentStatus.returned, returned_at=NOW)
)

# -- a HIT's content and its page -------------------------------------------------------

PAGE = (
    select(
        positions.c.position,
        positions.c.choice_order,
        positions.c.item_id,
        items.c.words,
        items.c.prompt,
        items.c.source,
        items.c.choices,
        items.c.continuation,
    )
    .join(items, items.c.id == positions.c.item_id)
    .where(positions.c.hit_id == bindparam("hit_id"))
    .order_by(positions.c.position)
)
SERVED = update(assignments).where(_a.id == bindparam("assignment_id")).values(page_served_at=NOW)

# -- submissions ------------------------------------------------------------------------

JUDGMENT_COLUMNS = (
    "position",
    "item_id",
    "option",
    "chosen_rank",
    "chosen_word",
    "d",
    "client_ms",
    "too_fast",
)
INSERT_JUDGMENTS = insert(judgments)
SUBMITTED = (
    update(assignments)
    .where(_a.id == bindparam("assignment_id"))
    .values(
        status=AssignmentStatus.submitted,
        submitted_at=NOW,
        late=bindparam("late"),
        over_cap=bindparam("over_cap"),
        extra_replica=bindparam("extra_replica"),
        after_block=bindparam("after_block"),
    )
)


def _pg_store_submission(was_leased: bool):
    """PostgreSQL stores a submission in one statement: the judgments (one array per
    column, unnested), the assignment's new status (`SUBMITTED`) and the HIT's counters
    (`slot_counters`, as the separate statements count them), so its compiled form and the
    server's prepared statement are reused and the three writes cost one round trip. The
    locks are those of the separate statements, in the same order: the assignment (already
    held), then the HIT."""
    # Array types without a length: a value too long for its column fails, as one by one.
    types = (Integer, Integer, Integer, Integer, String, Double, Integer, Boolean)
    arrays = (
        cast(bindparam(name, type_=ARRAY(t())), ARRAY(t()))
        for name, t in zip(JUDGMENT_COLUMNS, types, strict=True)
    )
    u = (
        func.unnest(*arrays)
        .table_valued(*(column(n, t()) for n, t in zip(JUDGMENT_COLUMNS, types, strict=True)))
        .render_derived(name="u")
    )
    rows = select(
        bindparam("assignment_id", type_=Integer),
        *(u.c[name] for name in JUDGMENT_COLUMNS),
        bindparam("late", type_=Boolean),
        NOW,
    )
    names = ["assignment_id", *JUDGMENT_COLUMNS, "late", "created_at"]
    judged = insert(judgments).from_select(names, rows, include_defaults=False).cte("judged")
    submitted = SUBMITTED.cte("submitted")
    # Not `hit_id`: an UPDATE takes a parameter named like a column of its table (here the
    # assignments' `hit_id`) as one more value to SET.
    return _hit_update(int(was_leased), 1, key="hit").add_cte(judged, submitted)


PG_STORE_SUBMISSION = {True: _pg_store_submission(True), False: _pg_store_submission(False)}
STORED_ANSWERS = select(judgments.c.position, judgments.c.option).where(
    judgments.c.assignment_id == bindparam("assignment_id")
)
LOCK_HIT = select(_h.replicas).where(_h.id == bindparam("hit_id")).with_for_update()
# What a late submission competes with, besides itself: the annotator's work held (for the
# cap) and the HIT's replica slots held by others (submitted, or leased and unexpired).
LATE_COUNTS = select(
    select(func.count())
    .where(_a.annotator_id == bindparam("annotator_id"), _a.id != bindparam("self"), ACTIVE)
    .scalar_subquery(),
    select(func.count())
    .where(_a.hit_id == bindparam("hit_id"), _a.id != bindparam("self"), ACTIVE)
    .scalar_subquery(),
)

# -- ratings (two steps per pair: the quality, then the consistency) --------------------

_r = ratings.c
RATINGS_OF = (
    select(
        _r.position,
        _r.quality,
        _r.consistency,
        _r.quality_at,
        _r.consistency_at,
        _r.too_fast,
        _r.late,
    )
    .where(_r.assignment_id == bindparam("assignment_id"))
    .order_by(_r.position)
)
INSERT_RATING = insert(ratings)
# Conditional on the consistency being open: a stored one is never overwritten. (Parameters
# named unlike the columns: an UPDATE takes a column's name as one more value to SET.)
SET_CONSISTENCY = (
    update(ratings)
    .where(
        _r.assignment_id == bindparam("p_assignment"),
        _r.position == bindparam("p_position"),
        _r.consistency.is_(None),
    )
    .values(
        consistency=bindparam("p_consistency"),
        consistency_ms=bindparam("p_consistency_ms"),
        consistency_at=NOW,
        too_fast=bindparam("p_too_fast"),
        late=bindparam("p_late"),
    )
)
