"""Publishing a study on a crowd platform: the posting, its units (ledger rows with
deterministic tokens), the cost estimate and the resumable `publish` driver.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.audit.service import Actor, record_by
from app.config import Settings
from app.crowd.base import (
    CapQualifying,
    CostEstimate,
    CrowdError,
    CrowdProvider,
    UnitLookup,
    UnitToPublish,
)
from app.crowd.common import (
    CrowdServiceError,
    PublishOptions,
    RateLimiter,
    SessionFactory,
    find_posting,
    hit_public_id,
    posting_parts,
    posting_spec,
    request_token,
    resolved_options,
    study_named,
    wanted_assignments,
)
from app.crowd.prolific import places_for
from app.db import unit_of_work
from app.models import (
    CrowdHit,
    CrowdPosting,
    Hit,
    Study,
    StudyStatus,
    User,
    utcnow,
)


def _check_channel(study: Study, provider: CrowdProvider) -> None:
    """The study must take people through this channel, in this environment."""
    channels = study.channels or {}
    if provider.name == "mturk":
        mturk = channels.get("mturk") or {}
        if not mturk.get("enabled"):
            raise CrowdServiceError(
                f"study {study.slug!r} does not take MTurk workers: enable its MTurk channel first",
                409,
            )
        if provider.environment == "production" and mturk.get("sandbox", True):
            raise CrowdServiceError(
                f"study {study.slug!r} is set to the MTurk sandbox (channels.mturk.sandbox); "
                "turn that off before publishing to production",
                409,
            )
    elif provider.name == "prolific":
        panel = channels.get("panel") or {}
        if not panel.get("enabled"):
            raise CrowdServiceError(
                f"study {study.slug!r} does not take panel participants: enable its panel first",
                409,
            )
        if not panel.get("completion_code"):
            raise CrowdServiceError(
                f"study {study.slug!r} has no panel completion code: set "
                "channels.panel.completion_code (the code its panel page shows)",
                409,
            )


def _check_prolific(
    session: Session, study: Study, provider: CrowdProvider, posting: CrowdPosting | None
) -> None:
    """Prolific: HITs to fill places with; a bundle size that the posting was made with;
    and no other Prolific study named in the study's panel settings, whose id our panel
    entry would demand of every participant (all of them would be refused)."""
    if wanted_assignments(session, study) < 1:
        raise CrowdServiceError(f"study {study.slug!r} has no HITs to publish: build them", 409)
    bundle = int(getattr(provider, "hits_per_participant", 1))
    made_with = int((posting.settings if posting else {}).get("hits_per_participant") or bundle)
    if posting is not None and posting.external_id is not None and made_with != bundle:
        raise CrowdServiceError(
            f"this Prolific study was published with {made_with} HITs per participant, "
            f"not {bundle}",
            409,
        )
    expected = ((study.channels or {}).get("panel") or {}).get("study_id")
    if expected and expected != (posting.external_id if posting else None):
        raise CrowdServiceError(
            f"study {study.slug!r} names Prolific study {expected} (channels.panel.study_id) "
            "and its entries must carry that id: clear it to publish a new Prolific study",
            409,
        )


def open_posting(
    session: Session,
    study: Study,
    provider: CrowdProvider,
    options: PublishOptions | None = None,
    *,
    by: Actor | None = None,
) -> CrowdPosting:
    """The study's posting on `provider`, made once; its settings fixed once prepared.

    New options for a posting whose HIT type exists are refused (409): the HITs already
    published carry the old ones.
    """
    _check_channel(study, provider)
    if study.status is not StudyStatus.collecting:
        raise CrowdServiceError(
            f"study {study.slug!r} is {study.status.value}: open it to annotators first", 409
        )
    wanted = resolved_options(study, options or PublishOptions(), provider)
    posting = find_posting(session, study, provider.name, provider.environment)
    if provider.name == "prolific":
        _check_prolific(session, study, provider, posting)
    if posting is None:
        posting = CrowdPosting(
            study_id=study.id,
            provider=provider.name,
            environment=provider.environment,
            settings=wanted,
            status="draft",
            created_by_id=by.id if isinstance(by, User) else None,
        )
        session.add(posting)
        session.flush()
        return posting
    if options is not None:
        kept = {k: v for k, v in posting.settings.items() if k != "cap_qualification_id"}
        if posting.external_id is not None and kept != wanted:
            raise CrowdServiceError(
                "this study is already published with other settings; its HITs keep them",
                409,
            )
        if posting.external_id is None:
            cap = posting.settings.get("cap_qualification_id")
            posting.settings = {**wanted, **({"cap_qualification_id": cap} if cap else {})}
            session.flush()
    return posting


def estimate(
    session: Session,
    settings: Settings,
    study: Study,
    provider: CrowdProvider,
    options: PublishOptions | None = None,
    *,
    bonus_cents: int = 0,
) -> CostEstimate:
    """What publishing every HIT of `study` costs on `provider` (before publishing).

    On MTurk HITs are priced in groups of equal replicas, since its fee depends on the
    assignments per HIT (10 or more cost more: `max_assignments`, an MTurk-only keyword).
    """
    posting = find_posting(session, study, provider.name, provider.environment)
    if posting is None or options is not None:
        # Not added to the session: only its settings are read.
        posting = CrowdPosting(
            provider=provider.name,
            environment=provider.environment,
            settings=resolved_options(study, options or PublishOptions(), provider),
        )
    spec = posting_spec(session, settings, study, posting)
    groups = session.execute(
        select(Hit.replicas, func.count()).where(Hit.study_id == study.id).group_by(Hit.replicas)
    ).all()
    if provider.name != "mturk":
        assignments = sum(int(r) * int(n) for r, n in groups)
        return provider.estimate_cost(spec, assignments, bonus_cents=bonus_cents)
    total = CostEstimate(0, 0, 0)
    notes: list[str] = []
    for i, (replicas, n) in enumerate(sorted(groups)):
        part = provider.estimate_cost(
            spec,
            int(replicas) * int(n),
            bonus_cents=bonus_cents if i == 0 else 0,
            max_assignments=int(replicas),
        )
        total = CostEstimate(
            total.rewards_cents + part.rewards_cents,
            total.fees_cents + part.fees_cents,
            total.bonuses_cents + part.bonuses_cents,
        )
        notes += [note for note in part.notes if note not in notes]
    if not groups and bonus_cents:
        total = provider.estimate_cost(spec, 0, bonus_cents=bonus_cents)
        notes = list(total.notes)
    return CostEstimate(total.rewards_cents, total.fees_cents, total.bonuses_cents, tuple(notes))


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

    Prolific has one unit, the platform study, whatever the number of HITs: its row
    hangs off the study's first HIT and `max_assignments` holds the places asked for.
    """
    study = session.get(Study, posting.study_id)
    assert study is not None
    if posting.provider == "prolific":
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
    places = places_for(
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
    """The next HIT to publish, marked `sending` (commit before the platform call).

    Pending rows first; then rows left `sending` by an interrupted run or `failed`, which
    the platform may have made already (their token, or a lookup, finds them).
    """
    study = session.get(Study, posting.study_id)
    assert study is not None
    query = (
        select(CrowdHit)
        .where(
            CrowdHit.posting_id == posting.id,
            CrowdHit.status.in_(("pending", "sending", "failed")),
        )
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
    session.flush()
    unit = UnitToPublish(
        hit_id=row.hit_id,
        hit_public_id=hit_public_id(study, row.hit_id),
        max_assignments=row.max_assignments,
        request_token=row.request_token,
    )
    return ClaimedUnit(row.id, unit, interrupted)


def finish_unit(session: Session, crowd_hit_id: int, external_hit_id: str) -> None:
    row = session.get(CrowdHit, crowd_hit_id)
    assert row is not None
    row.external_hit_id = external_hit_id
    row.status = "published"
    row.error = None
    row.published_at = utcnow()
    session.flush()


def fail_unit(session: Session, crowd_hit_id: int, error: CrowdError) -> None:
    row = session.get(CrowdHit, crowd_hit_id)
    assert row is not None
    row.status = "failed"
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

    One unit of work makes (or reuses) the posting; the platform's "container" (MTurk:
    the cap qualification, then the HIT type) is made once and stored; one unit of work
    writes a ledger row with a deterministic token for every HIT; then per HIT: a unit
    of work marks it `sending`, the platform call is made (paced by `limiter`), and a
    unit of work records the platform's id. A crash anywhere leaves rows that the next
    run finishes with the same tokens, so every HIT is published exactly once. A failed
    call is recorded on its row and on the posting, then raised. `limit`: publish at
    most this many HITs now.
    """
    limiter = limiter or RateLimiter(settings.crowd_calls_per_second)
    with unit_of_work(make_session) as session:
        study = study_named(session, slug)
        posting = open_posting(session, study, provider, options, by=by)
        report = PublishReport(posting.id, posting.external_id)
        report.estimate = estimate(session, settings, study, provider)
        spec = posting_spec(session, settings, study, posting)
        wants_cap = bool(posting.settings.get("cap_qualification"))
        report.warnings += _warnings(session, study, posting)

    # Only before the HIT type exists: its qualification requirements are fixed with it.
    if (
        wants_cap
        and report.external_id is None
        and not spec.qualifications.cap_qualification_id
        and isinstance(provider, CapQualifying)
    ):
        qualification = _platform(
            make_session, report.posting_id, lambda: provider.cap_qualification(spec)
        )
        with unit_of_work(make_session) as session:
            posting = session.get(CrowdPosting, report.posting_id)
            posting.settings = {**posting.settings, "cap_qualification_id": qualification}
            study = session.get(Study, posting.study_id)
            spec = posting_spec(session, settings, study, posting)

    if report.external_id is None:
        external_id = _platform(make_session, report.posting_id, lambda: provider.prepare(spec))
        with unit_of_work(make_session) as session:
            posting = session.get(CrowdPosting, report.posting_id)
            posting.external_id = external_id
            posting.status = "prepared"
            posting.error = None
        report.external_id = external_id

    with unit_of_work(make_session) as session:
        report.added = plan_units(session, session.get(CrowdPosting, report.posting_id))

    while limit is None or report.published < limit:
        with unit_of_work(make_session) as session:
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
            with unit_of_work(make_session) as session:
                fail_unit(session, claimed.crowd_hit_id, exc)
            raise
        with unit_of_work(make_session) as session:
            finish_unit(session, claimed.crowd_hit_id, external_hit_id)
        report.published += 1

    with unit_of_work(make_session) as session:
        posting = session.get(CrowdPosting, report.posting_id)
        counts = dict(
            session.execute(
                select(CrowdHit.status, func.count())
                .where(CrowdHit.posting_id == posting.id)
                .group_by(CrowdHit.status)
            ).all()
        )
        report.total = counts.get("published", 0)
        report.pending = sum(n for s, n in counts.items() if s in ("pending", "sending", "failed"))
        if report.pending == 0:
            posting.status = "published"
            posting.published_at = posting.published_at or utcnow()
            posting.error = None
        study = session.get(Study, posting.study_id)
        if posting.provider == "prolific" and report.total:
            report.warnings += _pin_prolific_study(session, study, posting, by)
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


def _platform(make_session: SessionFactory, posting_id: int, call: Callable[[], str]) -> str:
    """A posting-level platform call; its failure is recorded on the posting and raised."""
    try:
        return call()
    except CrowdError as exc:
        with unit_of_work(make_session) as session:
            posting = session.get(CrowdPosting, posting_id)
            posting.error = str(exc)[:4000]
            posting.status = "failed" if posting.external_id is None else posting.status
        raise


def _warnings(session: Session, study: Study, posting: CrowdPosting) -> list[str]:
    if posting.provider == "prolific":
        return _prolific_warnings(session, study, posting)
    many = session.scalar(select(func.count()).where(Hit.study_id == study.id, Hit.replicas >= 10))
    if many:
        return [f"{many} HITs have 10 or more assignments: MTurk charges a 40% fee on them"]
    return []


def _prolific_warnings(session: Session, study: Study, posting: CrowdPosting) -> list[str]:
    out = []
    asked = session.scalar(
        select(CrowdHit.max_assignments).where(CrowdHit.posting_id == posting.id)
    )
    wanted = places_for(
        wanted_assignments(session, study), int(posting.settings.get("hits_per_participant") or 1)
    )
    if asked is not None and wanted > asked:
        out.append(
            f"the study now needs {wanted} Prolific places, the Prolific study has {asked}: "
            "add places to it on Prolific"
        )
    return out


def _pin_prolific_study(
    session: Session, study: Study, posting: CrowdPosting, by: Actor | None
) -> list[str]:
    """Once the Prolific study is published, the study's panel demands its id
    (`channels.panel.study_id`): entries from any other panel study are refused. Audited.
    A study that names another Prolific study keeps it (with a warning); `open_posting`
    refuses to publish one (409) before anything is made."""
    panel = (study.channels or {}).get("panel") or {}
    current = panel.get("study_id")
    if current == posting.external_id:
        return []
    if current:
        return [
            f"the study names Prolific study {current} (channels.panel.study_id), not "
            f"{posting.external_id}: entries from this one are refused"
        ]
    study.channels = {**study.channels, "panel": {**panel, "study_id": posting.external_id}}
    session.flush()
    record_by(
        session,
        by or "system",
        "crowd_panel_study_set",
        study=study,
        provider=posting.provider,
        study_id=posting.external_id,
    )
    return []
