"""Publishing a study on a crowd platform: its units (ledger rows with deterministic
tokens) and the resumable `publish` driver. The posting and the cost estimate are
`app.crowd.postings` (`open_posting`, `estimate`, re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.service import Actor, record_by
from app.config import Settings
from app.crowd.base import (
    CapQualifying,
    CostEstimate,
    CrowdError,
    CrowdProvider,
    ExclusionQualifying,
    PostingSpec,
    PreparedLookup,
    Reopening,
    UnitLookup,
    UnitToPublish,
)
from app.crowd.calls import money_call
from app.crowd.claims import (
    claim_preparing,
    claimable_unit,
    lock_posting,
    lock_study,
    release_preparing,
    writing,
)
from app.crowd.common import (
    DOWN_UNITS,
    CrowdServiceError,
    PublishOptions,
    RateLimiter,
    SessionFactory,
    hit_public_id,
    lapse_time,
    pacing,
    posting_parts,
    posting_spec,
    request_token,
    study_named,
    unit_counts,
    wanted_assignments,
)
from app.crowd.ledger import CallRequest
from app.crowd.postings import estimate, open_posting
from app.crowd.registry import platform
from app.db import unit_of_work
from app.models import CrowdHit, CrowdPosting, Hit, Study, utcnow

__all__ = [
    "ClaimedUnit",
    "PublishReport",
    "claim_unit",
    "estimate",
    "fail_unit",
    "finish_unit",
    "open_posting",
    "plan_units",
    "publish",
]


# -- publishing: steps ---------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimedUnit:
    crowd_hit_id: int
    unit: UnitToPublish
    interrupted: bool  # an earlier call may have made it (sending or failed before)


def plan_units(session: Session, posting: CrowdPosting) -> int:
    """Write a pending ledger row, with its token, for every HIT of the study that the
    posting does not have yet (HITs built later join on the next publish). Returns how
    many were added.

    A platform with one unit per study (`Capabilities.units`, Prolific: the platform
    study) has one, whatever the number of HITs: its row hangs off the study's first HIT
    and `max_assignments` holds the places asked for (`Platform.places`).
    """
    study = session.get(Study, posting.study_id)
    assert study is not None
    if platform(posting.provider).caps.units == "study":
        return _plan_study_unit(session, posting, study)
    have = select(CrowdHit.hit_id).where(CrowdHit.posting_id == posting.id)
    hits = session.execute(
        select(Hit.id, Hit.replicas)
        .where(Hit.study_id == study.id, Hit.id.not_in(have))
        .order_by(Hit.index)
    ).all()
    parts = posting_parts(posting, study)
    for hit_id, replicas in hits:
        session.add(
            CrowdHit(
                posting_id=posting.id,
                hit_id=hit_id,
                attempt=0,
                request_token=request_token("hit", *parts, hit_id, 0),
                max_assignments=int(replicas),
                status="pending",
            )
        )
    session.flush()
    return len(hits)


def _plan_study_unit(session: Session, posting: CrowdPosting, study: Study) -> int:
    if session.scalar(select(CrowdHit.id).where(CrowdHit.posting_id == posting.id)):
        return 0
    first = session.scalar(
        select(Hit.id).where(Hit.study_id == study.id).order_by(Hit.index).limit(1)
    )
    if first is None:
        return 0
    places = platform(posting.provider).places(
        wanted_assignments(session, study), int(posting.settings.get("hits_per_participant") or 1)
    )
    session.add(
        CrowdHit(
            posting_id=posting.id,
            hit_id=first,
            attempt=0,
            request_token=request_token("study", *posting_parts(posting, study), 0),
            max_assignments=places,
            status="pending",
        )
    )
    session.flush()
    return 1


def claim_unit(session: Session, posting: CrowdPosting) -> ClaimedUnit | None:
    """The next HIT to publish, marked `sending` with the time of the claim (commit before
    the platform call).

    Pending rows first; then `failed` rows and rows left `sending` by a run that died (a
    claim older than `claims.STALE_CLAIM`), which the platform may have made already
    (their token, or a lookup, finds them). A row another run is sending now is left to it.
    """
    study = session.get(Study, posting.study_id)
    assert study is not None
    now = utcnow()
    query = (
        select(CrowdHit)
        .where(CrowdHit.posting_id == posting.id, claimable_unit(now))
        .order_by((CrowdHit.status != "pending"), CrowdHit.id)
        .limit(1)
    )
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    row = session.scalar(query)
    if row is None:
        return None
    interrupted = row.status != "pending"
    row.status = "sending"
    row.error = None
    row.published_at = now  # the claim's time while `sending`
    session.flush()
    unit = UnitToPublish(
        hit_id=row.hit_id,
        hit_public_id=hit_public_id(study, row.hit_id),
        max_assignments=row.max_assignments,
        request_token=row.request_token,
    )
    return ClaimedUnit(row.id, unit, interrupted)


def finish_unit(session: Session, crowd_hit_id: int, external_hit_id: str) -> None:
    """The unit is on the platform: `published`, and (where units lapse: MTurk) when its
    lifetime runs out, counted from the claim, taken before the call (`common.lapse_time`)."""
    row = session.get(CrowdHit, crowd_hit_id)
    assert row is not None
    posting = session.get(CrowdPosting, row.posting_id)
    assert posting is not None
    claimed = row.published_at or utcnow()
    row.external_hit_id = external_hit_id
    row.status = "published"
    row.error = None
    row.expires_at = lapse_time(posting.provider, claimed, posting.settings)
    row.published_at = utcnow()
    session.flush()


def fail_unit(session: Session, crowd_hit_id: int, error: CrowdError) -> None:
    row = session.get(CrowdHit, crowd_hit_id)
    assert row is not None
    row.status = "failed"
    row.published_at = None
    row.error = str(error)[:4000]
    posting = session.get(CrowdPosting, row.posting_id)
    assert posting is not None
    posting.error = row.error
    session.flush()


# -- publishing: the driver ----------------------------------------------------------------


@dataclass
class PublishReport:
    posting_id: int
    external_id: str | None
    added: int = 0  # ledger rows written this run
    published: int = 0  # platform HITs made (or found) this run
    total: int = 0  # platform HITs of the posting, published
    reopened: int = 0  # expired HITs listed again this run (a posting expired before)
    pending: int = 0  # still to publish (a limit was reached)
    estimate: CostEstimate | None = None
    warnings: list[str] = field(default_factory=list)


def publish(
    make_session: SessionFactory,
    settings: Settings,
    slug: str,
    provider: CrowdProvider,
    options: PublishOptions | None = None,
    *,
    by: Actor | None,
    limiter: RateLimiter | None = None,
    limit: int | None = None,
) -> PublishReport:
    """Publish every HIT of study `slug` not yet on `provider`: resumable and idempotent.

    One unit of work makes (or reuses) the posting and, before its platform "container"
    exists, commits a claim on preparing it (`claims`: a second run meanwhile is refused,
    409 "publishing in progress"); the container (MTurk: the cap qualification, then the
    HIT type; Prolific: the draft study, looked up first when an earlier attempt may have
    made it) is made once and stored; one unit of work writes a ledger row with a
    deterministic token for every HIT; a posting expired before is reopened (`_reopen`:
    its expired HITs listed again by one ledgered call; refused, 409 with nothing changed,
    on a platform that cannot, Prolific); then per HIT: a unit of work claims it (`sending`),
    the platform call is made (paced by `limiter`), and a unit of work records the
    platform's id. A crash anywhere leaves rows that the next run finishes with the same
    tokens (a claim once it is stale), so every HIT is published exactly once. A failed
    call is recorded on its row and on the posting, then raised. `limit`: publish at most
    this many HITs now.
    """
    limiter = limiter or pacing(settings, provider)
    interrupted = False
    with writing(make_session) as session:
        study = study_named(session, slug)
        lock_study(session, study.id)
        posting = open_posting(session, study, provider, options, by=by)
        _check_reopenable(session, posting, provider)
        report = PublishReport(posting.id, posting.external_id)
        if posting.external_id is None:
            interrupted = claim_preparing(posting, utcnow())
        report.estimate = estimate(session, settings, study, provider)
        spec = posting_spec(session, settings, study, posting)
        wants_cap = bool(posting.settings.get("cap_qualification"))
        report.warnings += platform(posting.provider).publish_warnings(session, study, posting)

    if report.external_id is None:
        report.external_id = _prepare(
            make_session, settings, provider, report, spec, wants_cap, interrupted
        )

    with writing(make_session) as session:
        report.added = plan_units(session, lock_posting(session, report.posting_id))
    report.reopened = _reopen(make_session, provider, report.posting_id, by)

    while limit is None or report.published < limit:
        with writing(make_session) as session:
            claimed = claim_unit(session, session.get(CrowdPosting, report.posting_id))
        if claimed is None:
            break
        limiter.wait()
        try:
            external_hit_id = None
            if claimed.interrupted and isinstance(provider, UnitLookup):
                external_hit_id = provider.find_published(report.external_id, claimed.unit)
            if external_hit_id is None:
                external_hit_id = provider.publish(report.external_id, spec, claimed.unit)
        except CrowdError as exc:
            with writing(make_session) as session:
                fail_unit(session, claimed.crowd_hit_id, exc)
            raise
        with writing(make_session) as session:
            finish_unit(session, claimed.crowd_hit_id, external_hit_id)
        report.published += 1

    with writing(make_session) as session:
        posting = lock_posting(session, report.posting_id)
        counts = unit_counts(session, posting.id)
        report.total = counts.get("published", 0)
        report.pending = sum(n for s, n in counts.items() if s in ("pending", "sending", "failed"))
        if counts.get("sending"):
            report.warnings.append(
                f"{counts['sending']} HITs are being published by another run (or by one "
                "that stopped: publish again later to finish them)"
            )
        if report.pending == 0:
            posting.status = "published"
            posting.published_at = posting.published_at or utcnow()
            posting.error = None
        study = session.get(Study, posting.study_id)
        if report.total:
            report.warnings += platform(posting.provider).after_publish(session, study, posting, by)
        record_by(
            session,
            by,
            "crowd_published",
            study=study,
            provider=posting.provider,
            environment=posting.environment,
            published=report.published,
            total=report.total,
            pending=report.pending,
        )
    return report


def _expired_units(session: Session, posting_id: int) -> int:
    """Units a reopen lists again: expired, past their lifetime, or `unknown`."""
    counts = unit_counts(session, posting_id)
    return sum(counts.get(state, 0) for state in DOWN_UNITS)


def _check_reopenable(session: Session, posting: CrowdPosting, provider: CrowdProvider) -> None:
    """An expired posting is published again by reopening its units (`_reopen`); on a
    platform that cannot (`Capabilities.reopens`; Prolific stops a study for good) that is
    refused before anything is done, rather than shown as published while its work stays
    closed."""
    if isinstance(provider, Reopening) or not _expired_units(session, posting.id):
        return
    raise CrowdServiceError(
        f"this study's {provider.name} posting ({posting.external_id}) was expired, and "
        f"{provider.name} cannot take a stopped study live again: nothing was published",
        409,
    )


def _reopen(
    make_session: SessionFactory, provider: CrowdProvider, posting_id: int, by: Actor | None
) -> int:
    """Publishing an expired posting again reopens it: its expired units (expired by us,
    past their lifetime, or `unknown`) are listed again (MTurk: `UpdateExpirationForHIT`
    to the posting's lifetime from now; the local channel: its invite links take new
    work) by one ledgered `reopen` call (`calls.money_call`: recorded before it is made,
    its outcome after, made once; a failed one is retried with its token by the next
    publish), which marks each unit published as the platform takes it, so a later
    expiry finds them live and the Crowd page counts them open. How many."""
    with unit_of_work(make_session) as session:
        expired = _expired_units(session, posting_id)
    if not expired:
        return 0
    return money_call(make_session, provider, posting_id, CallRequest("reopen"), by=by).units


def _prepare(
    make_session: SessionFactory,
    settings: Settings,
    provider: CrowdProvider,
    report: PublishReport,
    spec: PostingSpec,
    wants_cap: bool,
    interrupted: bool,
) -> str:
    """Make the posting's container under this run's claim; its platform id.

    Only before the HIT type exists: its qualification requirements are fixed with it.
    An earlier attempt that may have made the container (a claim taken over, a failed
    call whose answer was lost) is looked up first where the platform's create is not
    idempotent (`PreparedLookup`: a Prolific study, by its internal name).
    """
    capped = wants_cap and not spec.qualifications.cap_qualification_id
    if capped and isinstance(provider, CapQualifying):
        qualification = _platform(
            make_session, report.posting_id, lambda: provider.cap_qualification(spec)
        )
        spec = _keep_own(make_session, settings, report, "cap_qualification_id", qualification)
    # The earlier studies' workers (issue 33): a qualification they hold keeps them out.
    excluding = spec.exclude_workers and not spec.qualifications.exclusion_qualification_id
    if excluding and isinstance(provider, ExclusionQualifying):
        made = _platform(
            make_session, report.posting_id, lambda: provider.exclusion_qualification(spec)
        )
        spec = _keep_own(make_session, settings, report, "exclusion_qualification_id", made)

    def make() -> str:
        if interrupted and isinstance(provider, PreparedLookup):
            found = provider.find_prepared(spec)
            if found is not None:
                return found
        return provider.prepare(spec)

    external_id = _platform(make_session, report.posting_id, make)
    with writing(make_session) as session:
        posting = lock_posting(session, report.posting_id)
        if posting.external_id is not None and posting.external_id != external_id:
            # A run that took over a claim this run held too long recorded its own first.
            report.warnings.append(
                f"another run made {posting.provider} {posting.external_id} meanwhile: "
                f"{external_id}, made by this run, is not used (delete it on the platform)"
            )
            return posting.external_id
        posting.external_id = external_id
        posting.status = "prepared"
        posting.error = None
        release_preparing(posting)
    return external_id


def _keep_own(
    make_session: SessionFactory, settings: Settings, report: PublishReport, key: str, value: str
) -> PostingSpec:
    """Keep a platform id the posting made for itself (a qualification) in its settings;
    the posting's spec with it."""
    with writing(make_session) as session:
        posting = lock_posting(session, report.posting_id)
        posting.settings = {**posting.settings, key: value}
        study = session.get(Study, posting.study_id)
        return posting_spec(session, settings, study, posting)


def _platform(make_session: SessionFactory, posting_id: int, call: Callable[[], str]) -> str:
    """A posting-level platform call; its failure is recorded on the posting (which gives
    up this run's claim on preparing it) and raised."""
    try:
        return call()
    except CrowdError as exc:
        with writing(make_session) as session:
            posting = lock_posting(session, posting_id)
            posting.error = str(exc)[:4000]
            if posting.external_id is None:
                posting.status = "failed"
                release_preparing(posting)
        raise
