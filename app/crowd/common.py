"""What every part of the crowd service shares: errors, providers, tokens, pacing, postings
and the `PostingSpec` a posting is published as.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, case, exists, func, or_, select
from sqlalchemy.orm import Session

from app.audit.service import Actor
from app.config import Settings
from app.crowd.audience import spec_audience
from app.crowd.base import (
    CapQualifying,
    CrowdProvider,
    CrowdServiceError,
    PostingSpec,
    Qualifications,
)
from app.crowd.platform import QUALIFICATIONS, ProviderOptions, wanted_assignments
from app.crowd.registry import bundling, platform
from app.db import unit_of_work
from app.models import (
    Assignment,
    CrowdHit,
    CrowdPosting,
    Study,
    User,
    utcnow,
)
from app.studytypes.registry import study_type_of

__all__ = ["CrowdServiceError", "wanted_assignments"]  # re-exported: the services' names

CALL_KINDS = ("approve", "reject", "bonus", "block", "unblock", "qualify", "expire", "reopen")
# The publish options' keywords when none are given: the study type's (its plug-in's
# `crowd_keywords`, as its `crowd_description` is the posting's default description).
DEFAULT_KEYWORDS = ("language", "next word", "guess", "research")
# Publish options that default from the study file's channel section, on a platform that
# takes them from there (`Capabilities.qualifications_from_study`).
STUDY_QUALIFICATIONS = QUALIFICATIONS


# -- providers, tokens, pacing -------------------------------------------------------------


def provider_for(
    settings: Settings,
    name: str,
    environment: str | None = None,
    *,
    hits_per_participant: int = 1,
    sessions: SessionFactory | None = None,
) -> CrowdProvider:
    """The provider of platform `name` (`app.crowd.registry`) for `environment` (None: the
    platform's default), as its `Platform.provider` makes it: refused (4xx) where the
    settings do not allow it. `hits_per_participant` > 1: a bundle of HITs per place, on a
    platform that has them (`Capabilities.bundles`); `sessions`: the caller's session
    factory, for a platform whose "platform" is our own store (local).
    """
    made = platform(name)
    if not 1 <= hits_per_participant <= 1000:
        raise CrowdServiceError("hits per participant must be between 1 and 1000")
    if not made.caps.bundles and hits_per_participant != 1:
        names = " and ".join(p.label for p in bundling())
        raise CrowdServiceError(f"bundles of HITs per participant are for {names} only")
    how = ProviderOptions(hits_per_participant=hits_per_participant, sessions=sessions)
    return made.provider(settings, environment, how)


def request_token(kind: str, *parts: object) -> str:
    """A deterministic idempotency token of at most 64 characters: `ebc-{kind}-{hash}`.

    `parts` name the call (posting, study, target, attempt); the study's creation time
    is among them, so two databases sharing one platform account do not collide.
    """
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:40]
    token = f"ebc-{kind[:12]}-{digest}"
    assert len(token) <= 64
    return token


def hit_public_id(study: Study, hit_id: int) -> str:
    """Our HIT's opaque id for the platform (MTurk RequesterAnnotation): a hash that says
    nothing about the HIT's items, kinds or ranks."""
    raw = f"ebc-hit|{study.id}|{study.slug}|{_stamp(study.created_at)}|{hit_id}"
    return "h-" + hashlib.sha256(raw.encode()).hexdigest()[:30]


def _stamp(when: datetime | None) -> str:
    return when.isoformat(timespec="microseconds") if when else ""


def posting_parts(posting: CrowdPosting, study: Study) -> tuple[object, ...]:
    return (posting.provider, posting.environment, study.id, study.slug, _stamp(study.created_at))


def posting_key(posting: CrowdPosting, study: Study) -> str:
    """`PostingSpec.key`: 12 hex digits from `posting_parts`."""
    raw = "|".join(map(str, posting_parts(posting, study)))
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


class RateLimiter:
    """At most `per_second` calls per second (bulk publishing and paying)."""

    def __init__(
        self,
        per_second: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if per_second <= 0:
            raise ValueError("calls per second must be positive")
        self.interval = 1.0 / per_second
        self.clock = clock
        self.sleep = sleep
        self._next = 0.0

    def wait(self) -> None:
        now = self.clock()
        if now < self._next:
            self.sleep(self._next - now)
            now = self._next
        self._next = now + self.interval


def paced(provider: CrowdProvider) -> bool:
    """Whether the provider's calls reach a platform, so bulk runs pace them (and the
    dashboard batches them): `Capabilities.remote`."""
    return platform(provider.name).caps.remote


def pacing(settings: Settings, provider: CrowdProvider) -> RateLimiter:
    """The pace of a bulk run's calls: `EBC_CROWD_CALLS_PER_SECOND`, or none where the
    calls reach no platform (`paced`)."""
    return RateLimiter(settings.crowd_calls_per_second if paced(provider) else math.inf)


def actor_name(by: Actor | None) -> str | None:
    if by is None:
        return None
    return by.username if isinstance(by, User) else str(by)[:255]


SessionFactory = Callable[[], Session]


# -- postings and what they are published as ---------------------------------------------


@dataclass(frozen=True)
class PublishOptions:
    """What a researcher chooses when publishing (stored on the posting as `settings`).

    None: the study's own value (reward, title, lease as the assignment duration; on MTurk
    the qualifications of the study file's `channels.mturk`). To drop a qualification the
    study file sets: `min_approval_rate=0` or `min_approved=0` (no requirement), `locales=()`,
    `masters=False`.
    """

    reward_cents: int | None = None
    title: str | None = None
    description: str | None = None
    keywords: tuple[str, ...] = DEFAULT_KEYWORDS
    lifetime_days: float = 7
    auto_approve_days: float = 3
    min_approval_rate: int | None = None
    min_approved: int | None = None
    locales: tuple[str, ...] | None = None
    masters: bool | None = None
    cap_qualification: bool = True  # MTurk: hide the study from workers at the cap

    def check(self) -> None:
        if self.reward_cents is not None and not 1 <= self.reward_cents <= 100_000:
            raise CrowdServiceError("the reward must be between 1 cent and $1,000")
        if not 0 < self.lifetime_days <= 365:
            raise CrowdServiceError("a HIT stays listed between a moment and 365 days")
        if not 0 <= self.auto_approve_days <= 30:
            raise CrowdServiceError("automatic approval comes after 0 to 30 days")
        if self.min_approval_rate is not None and not 0 <= self.min_approval_rate <= 100:
            raise CrowdServiceError("the approval rate is a percentage (0 to 100)")
        if self.min_approved is not None and not 0 <= self.min_approved <= 10_000_000:
            raise CrowdServiceError("the number of approved HITs must be 0 or more")
        bad = [c for c in self.locales or () if not re.fullmatch(r"[A-Z]{2}", c)]
        if bad:
            raise CrowdServiceError(f"locales are country codes such as US or GB, not {bad}")


def study_named(session: Session, slug: str) -> Study:
    from app.studies.service import get_study

    study = get_study(session, slug)
    if study is None:
        raise CrowdServiceError(f"no study {slug!r}", 404)
    return study


def find_posting(
    session: Session, study: Study, provider: str, environment: str
) -> CrowdPosting | None:
    return session.scalar(
        select(CrowdPosting).where(
            CrowdPosting.study_id == study.id,
            CrowdPosting.provider == provider,
            CrowdPosting.environment == environment,
        )
    )


def require_posting(session: Session, study: Study, provider: CrowdProvider) -> CrowdPosting:
    posting = find_posting(session, study, provider.name, provider.environment)
    if posting is None:
        raise CrowdServiceError(
            f"study {study.slug!r} was never published on {provider.name} ({provider.environment})",
            404,
        )
    return posting


def posting_id_of(make_session: SessionFactory, slug: str, provider: CrowdProvider) -> int:
    with unit_of_work(make_session) as session:
        return require_posting(session, study_named(session, slug), provider).id


def study_qualifications(study: Study, provider: str) -> dict[str, Any]:
    """The qualifications the study file sets for `provider` (its `channels.<name>`, on a
    platform that takes them from there: `Capabilities.qualifications_from_study`), those
    it leaves unset left out."""
    made = platform(provider)
    if not made.caps.qualifications_from_study:
        return {}
    given = made.settings_of(study)
    return {name: given[name] for name in STUDY_QUALIFICATIONS if given.get(name) is not None}


def resolved_options(
    study: Study, options: PublishOptions, provider: CrowdProvider
) -> dict[str, Any]:
    """The posting's settings: `options`, each unset one from the study (`study_
    qualifications`), and the bundle size (`Capabilities.bundles`)."""
    given = study_qualifications(study, provider.name)
    options = replace(
        options,
        **{
            name: tuple(value) if name == "locales" else value
            for name, value in given.items()
            if getattr(options, name) is None
        },
    )
    options.check()
    reward = options.reward_cents if options.reward_cents is not None else study.reward_cents
    # Lab annotators may be volunteers: a posting that reaches no platform records 0.
    if (not reward or reward < 1) and platform(provider.name).caps.remote:
        raise CrowdServiceError(
            f"study {study.slug!r} has no reward: set payment.reward_cents or give a reward"
        )
    plugin = study_type_of(study)
    default_description, keywords = plugin.crowd_description, options.keywords
    if keywords == DEFAULT_KEYWORDS:
        keywords = plugin.crowd_keywords
    out = asdict(options)
    out.update(
        # "At least 0" asks nothing: no requirement (how an option drops the study's).
        min_approval_rate=options.min_approval_rate or None,
        min_approved=options.min_approved or None,
        reward_cents=int(reward or 0),
        title=(options.title or study.title)[:128],
        description=(options.description or default_description)[:2000],
        keywords=list(keywords),
        locales=list(options.locales or ()),
        masters=bool(options.masters),
        assignment_seconds=int(study.lease_seconds),
        hits_per_participant=int(getattr(provider, "hits_per_participant", 1)),
        # Only a platform that can hide a study at the cap has the option: elsewhere it is
        # always off, so the CLI (on by default) and the dashboard (no checkbox) agree.
        cap_qualification=bool(options.cap_qualification) and isinstance(provider, CapQualifying),
    )
    return out


def lifetime_seconds(posting_settings: dict[str, Any]) -> int:
    """How long a posting's units stay listed (its `lifetime_days`), at least 30 s."""
    return max(30, round(float(posting_settings["lifetime_days"]) * 86400))


# A unit's states that an expiry takes down and that a reopen lists again (`unit_state`;
# `unknown`: an expire or reopen of it may have taken effect, so both include it).
LIVE_UNITS = ("published", "unknown")
DOWN_UNITS = ("expired", "unknown")


def lapse_time(provider: str, since: datetime, posting_settings: dict[str, Any]) -> datetime | None:
    """When a unit published or reopened at `since` stops being listed by itself (None: it
    never does). `since` is taken before the call, so this is no later than the platform's
    own expiry (but a unit found made by an earlier, interrupted attempt expires earlier).
    Only a platform whose units lapse (`Capabilities.units_lapse`: MTurk's
    `LifetimeInSeconds`) has one; elsewhere a unit stays open until it is expired."""
    if not platform(provider).caps.units_lapse:
        return None
    return since + timedelta(seconds=lifetime_seconds(posting_settings))


def unit_state(now: datetime) -> ColumnElement[str]:
    """A unit's status as the platform sees it `now`: a published unit whose lifetime ran
    out (`expires_at` passed: MTurk no longer lists it) is expired."""
    lapsed = (CrowdHit.status == "published") & (CrowdHit.expires_at <= now)
    return case((lapsed, "expired"), else_=CrowdHit.status)


def unit_counts(session: Session, posting_id: int) -> dict[str, int]:
    """The posting's units by status as the platform sees them now (`unit_state`)."""
    state = unit_state(utcnow())
    return dict(
        session.execute(
            select(state, func.count()).where(CrowdHit.posting_id == posting_id).group_by(state)
        ).all()
    )


def posting_spec(
    session: Session, settings: Settings, study: Study, posting: CrowdPosting
) -> PostingSpec:
    """What the posting is published as, from its stored settings."""
    s = posting.settings
    made = platform(posting.provider)
    entry = made.entry(settings, study, s, wanted_assignments(session, study))
    return PostingSpec(
        study_slug=study.slug,
        title=s["title"],
        description=s["description"],
        reward_cents=int(s["reward_cents"]),
        assignment_seconds=int(s["assignment_seconds"]),
        lifetime_seconds=lifetime_seconds(s),
        auto_approve_seconds=round(float(s["auto_approve_days"]) * 86400),
        keywords=tuple(s.get("keywords") or ()),
        qualifications=Qualifications(
            min_approval_rate=s.get("min_approval_rate"),
            min_approved=s.get("min_approved"),
            locales=tuple(s.get("locales") or ()),
            masters=bool(s.get("masters")),
            cap_qualification_id=s.get("cap_qualification_id"),
            exclusion_qualification_id=s.get("exclusion_qualification_id"),
        ),
        entry_url=entry.url,
        completion_code=entry.completion_code,
        places=entry.places,
        key=posting_key(posting, study),
        **spec_audience(session, study, made),
    )


def platform_ref(provider: str, assignment: Assignment) -> str | None:
    """The platform's id of an assignment's work (`Platform.work_ref`): MTurk's assignment
    id; on Prolific the participant's submission (the session id of their entry), which the
    assignments of a bundle share; on the local channel, which has no platform, our own
    public id."""
    return getattr(assignment, ref_column(provider).key)


def ref_column(provider: str) -> Any:
    """The `Assignment` column that `platform_ref` reads, for queries."""
    return getattr(Assignment, platform(provider).work_ref)


# -- whose work an assignment is -------------------------------------------------------------


def _units(study_id: int, provider: str, environment: str, *, same: bool) -> Any:
    """The platform ids of the units (MTurk HITs, the Prolific study) of the study's posting
    on `provider` in `environment` (`same`), or in its other environments."""
    where_environment = (
        CrowdPosting.environment == environment if same else CrowdPosting.environment != environment
    )
    return (
        select(CrowdHit.external_hit_id)
        .join(CrowdPosting, CrowdPosting.id == CrowdHit.posting_id)
        .where(
            CrowdPosting.study_id == study_id,
            CrowdPosting.provider == provider,
            where_environment,
            CrowdHit.external_hit_id.is_not(None),
        )
    )


@dataclass(frozen=True)
class WorkOf:
    """Which assignments are a posting's work, as SQL conditions on `Assignment`.

    An assignment records its platform unit in `external_hit_id`: the MTurk HIT (from the
    worker's URL, overwritten by each sync with the platform's own listing) or the Prolific
    study (written by a sync that listed the participant's submission). Platform ids do
    not say which environment they belong to, so this is what keeps a sandbox pilot's
    assignments out of a production approval, and the reverse.

    - `own`: the posting's own work (only this is reviewed, paid or shown as payable);
    - `shown`: what its Crowd page lists: its own work and work no posting claims yet
      (no unit recorded, or a unit of no posting: a sync will tell), never the work of
      the study's posting in another environment.
    """

    own: ColumnElement[bool]
    shown: ColumnElement[bool]


def work_of(study_id: int, provider: str, environment: str) -> WorkOf:
    hit = Assignment.external_hit_id
    own = hit.in_(_units(study_id, provider, environment, same=True))
    others = hit.in_(_units(study_id, provider, environment, same=False))
    # NULL IN (...) is NULL, not false: an assignment with no unit is nobody's yet.
    return WorkOf(own=own, shown=or_(hit.is_(None), own, ~others))


def is_own_work(session: Session, posting: CrowdPosting, assignment: Assignment) -> bool:
    """Whether `assignment` is work of `posting` (see `WorkOf`)."""
    if assignment.external_hit_id is None:
        return False
    return bool(
        session.scalar(
            select(
                exists().where(
                    CrowdHit.posting_id == posting.id,
                    CrowdHit.external_hit_id == assignment.external_hit_id,
                )
            )
        )
    )


def not_own_work(posting: CrowdPosting, what: str) -> str:
    """Why `what`, which records a platform unit of no concern to `posting`, is refused."""
    return (
        f"{what} is not work of the study's {posting.provider} {posting.environment} "
        "posting: it belongs to another environment, or to a unit this posting never "
        "published"
    )


def confirmed(provider: str, assignment: Assignment, own: bool) -> bool:
    """The platform confirmed this work of the posting, so it can be reviewed and paid:
    MTurk's sync cleared `unverified`; where a participant's submission is reviewed
    (`Capabilities.review_unit`, Prolific) a sync listed it as handed in."""
    if not own or assignment.unverified:
        return False
    return listing_rule(provider, assignment.review_status)


def listing_rule(provider: str, review: object) -> bool:
    """`confirmed`'s listing rule on a review status (also on grouped columns): where a
    participant's submission is reviewed, its work is confirmed once a sync listed it (and
    so gave it a review status); elsewhere the listing adds nothing."""
    return platform(provider).caps.review_unit != "submission" or review is not None
