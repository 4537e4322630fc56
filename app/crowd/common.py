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
from urllib.parse import unquote

from sqlalchemy import ColumnElement, case, exists, func, or_, select
from sqlalchemy.orm import Session

from app.audit.service import Actor
from app.config import Settings
from app.crowd.base import (
    CapQualifying,
    CrowdError,
    CrowdProvider,
    PostingSpec,
    Qualifications,
)
from app.db import unit_of_work
from app.models import (
    Assignment,
    Channel,
    CrowdHit,
    CrowdPosting,
    Hit,
    Study,
    User,
    utcnow,
)
from app.studytypes.registry import study_type_of

PROVIDERS = ("mturk", "prolific", "local")
ENVIRONMENTS = ("sandbox", "production")
# The local channel (invite links) has one environment of its own: no platform, no sandbox.
LOCAL = "local"
CALL_KINDS = ("approve", "reject", "bonus", "block", "unblock", "qualify", "expire", "reopen")
CHANNEL_OF = {"mturk": Channel.mturk, "prolific": Channel.panel, "local": Channel.local}
# The publish options' keywords when none are given: the study type's (its plug-in's
# `crowd_keywords`, as its `crowd_description` is the posting's default description).
DEFAULT_KEYWORDS = ("language", "next word", "guess", "research")
# Publish options that default from the study file's `channels.mturk`.
STUDY_QUALIFICATIONS = ("min_approval_rate", "min_approved", "locales", "masters")
# The panel URL parameters (`channels.panel`) and Prolific's placeholder for each.
PROLIFIC_IDS = {
    "participant_param": "PROLIFIC_PID",
    "study_param": "STUDY_ID",
    "session_param": "SESSION_ID",
}


class CrowdServiceError(Exception):
    """A crowd request that cannot be carried out (a 4xx: nothing was changed)."""

    def __init__(self, message: str, status_code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


# -- providers, tokens, pacing -------------------------------------------------------------


def provider_for(
    settings: Settings,
    name: str,
    environment: str | None = None,
    *,
    hits_per_participant: int = 1,
    sessions: SessionFactory | None = None,
) -> CrowdProvider:
    """The provider `name` ("mturk", "prolific" or "local") for `environment`.

    MTurk: the sandbox unless `environment="production"` and `EBC_MTURK_PRODUCTION` is
    on (real money); `EBC_MTURK_ENDPOINT_URL` replaces AWS's endpoint either way, except
    that one on AWS other than the sandbox's is production (real money), allowed only as
    the production environment (the setting, and the dashboard's typed confirmation).
    Credentials come from the AWS chain, never from settings. Prolific has no sandbox:
    production (the default for it), from the `EBC_PROLIFIC_*` settings;
    `hits_per_participant` > 1 makes one Prolific place a bundle of that many HITs.
    Local (invite links): its own environment, "local"; its "platform" is our own store,
    which it reads through `sessions` (the caller's session factory).
    """
    if name not in PROVIDERS:
        raise CrowdServiceError(f"unknown provider {name!r}: one of {', '.join(PROVIDERS)}")
    if not 1 <= hits_per_participant <= 1000:
        raise CrowdServiceError("hits per participant must be between 1 and 1000")
    if name != "prolific" and hits_per_participant != 1:
        raise CrowdServiceError("bundles of HITs per participant are for Prolific only")
    if name == "local":
        if environment not in (None, LOCAL):
            raise CrowdServiceError(
                "the local channel (invite links) has one environment, local: no sandbox or "
                "production"
            )
        if sessions is None:
            raise ValueError("the local provider reads our own store: give it `sessions`")
        from app.crowd.local import LocalProvider

        return LocalProvider(sessions)
    if environment is None:
        environment = "sandbox" if name == "mturk" else "production"
    if environment not in ENVIRONMENTS:
        raise CrowdServiceError(f"unknown environment {environment!r}: sandbox or production")
    if name == "mturk":
        from app.crowd.mturk import MTurkProvider, moves_real_money

        if environment != "production" and moves_real_money(settings.mturk_endpoint_url):
            raise CrowdServiceError(
                f"EBC_MTURK_ENDPOINT_URL ({settings.mturk_endpoint_url}) is MTurk production, "
                "which moves real money: use the production environment (it needs "
                "EBC_MTURK_PRODUCTION and a confirmation), or unset it for the sandbox",
                403,
            )
        if environment == "production" and not settings.mturk_production:
            raise CrowdServiceError(
                "MTurk production moves real money and is off: set EBC_MTURK_PRODUCTION=true "
                "to allow it",
                403,
            )
        return MTurkProvider(
            environment,
            endpoint_url=settings.mturk_endpoint_url,
            max_attempts=settings.mturk_max_attempts,
            retry_mode=settings.mturk_retry_mode,
        )
    if environment != "production":
        raise CrowdServiceError("Prolific has no sandbox: use its production API (a test study)")
    from app.crowd.prolific import ProlificProvider

    try:
        return ProlificProvider.from_settings(
            settings, environment=environment, hits_per_participant=hits_per_participant
        )
    except CrowdError as exc:
        raise CrowdServiceError(str(exc), 400) from exc


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
    dashboard batches them); False for the local channel (`paced = False`)."""
    return bool(getattr(provider, "paced", True))


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
    """The qualifications the study file sets for `provider` (MTurk: `channels.mturk`;
    none elsewhere), those it leaves unset left out."""
    if provider != "mturk":
        return {}
    mturk = (study.channels or {}).get("mturk") or {}
    return {name: mturk[name] for name in STUDY_QUALIFICATIONS if mturk.get(name) is not None}


def resolved_options(
    study: Study, options: PublishOptions, provider: CrowdProvider
) -> dict[str, Any]:
    """The posting's settings: `options`, each unset one from the study (its file's
    `channels.mturk` qualifications on MTurk), and Prolific's bundle size."""
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
    # Lab annotators may be volunteers: a local posting without a reward records 0.
    if (not reward or reward < 1) and provider.name != LOCAL:
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


def prolific_entry_url(settings: Settings, study: Study) -> str:
    """The study's panel URL with Prolific's own placeholders.

    `panel_entry_url` names each placeholder after the study's URL parameter
    (`pid={{%pid%}}` for a renamed `participant_param`); Prolific substitutes only its
    own names, so the parameters keep the study's names and take Prolific's placeholders.
    """
    from app.annotation.identities import panel_entry_url

    url = panel_entry_url(settings.base_url, settings.secret_key, study)
    panel = (study.channels or {}).get("panel") or {}
    placeholder = {panel.get(param) or name: name for param, name in PROLIFIC_IDS.items()}
    base, _, query = url.partition("?")
    pairs = []
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if unquote(name) in placeholder:
            value = "{{%" + placeholder[unquote(name)] + "%}}"
        pairs.append(f"{name}={value}")
    return f"{base}?{'&'.join(pairs)}"


def wanted_assignments(session: Session, study: Study) -> int:
    """HIT assignments the study wants: the sum of its HITs' replicas."""
    return int(
        session.scalar(
            select(func.coalesce(func.sum(Hit.replicas), 0)).where(Hit.study_id == study.id)
        )
    )


def lifetime_seconds(posting_settings: dict[str, Any]) -> int:
    """How long a posting's units stay listed (its `lifetime_days`), at least 30 s."""
    return max(30, round(float(posting_settings["lifetime_days"]) * 86400))


# Platforms whose units stop taking work by themselves once the posting's lifetime has
# passed since they were made or reopened (MTurk's `LifetimeInSeconds`); a local posting
# and a Prolific study stay open until they are expired.
LAPSING = frozenset({"mturk"})
# A unit's states that an expiry takes down and that a reopen lists again (`unit_state`;
# `unknown`: an expire or reopen of it may have taken effect, so both include it).
LIVE_UNITS = ("published", "unknown")
DOWN_UNITS = ("expired", "unknown")


def lapse_time(provider: str, since: datetime, posting_settings: dict[str, Any]) -> datetime | None:
    """When a unit published or reopened at `since` stops being listed by itself (None: it
    never does). `since` is taken before the call, so this is no later than the platform's
    own expiry (but a unit found made by an earlier, interrupted attempt expires earlier)."""
    if provider not in LAPSING:
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
    assignments = wanted_assignments(session, study)
    if posting.provider == "mturk":
        entry_url = f"{settings.base_url.rstrip('/')}/mturk/{study.slug}"
        completion_code, places = None, assignments
    elif posting.provider == LOCAL:
        # Every invited annotator has a link of their own (the Annotators page).
        entry_url, completion_code, places = "", None, assignments
    else:
        from app.crowd.prolific import places_for

        entry_url = prolific_entry_url(settings, study)
        completion_code = ((study.channels or {}).get("panel") or {}).get("completion_code")
        # A Prolific place is one participant, who does a bundle of HITs.
        places = places_for(assignments, int(s.get("hits_per_participant") or 1))
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
        ),
        entry_url=entry_url,
        completion_code=completion_code,
        places=places,
        key=posting_key(posting, study),
    )


def platform_ref(provider: str, assignment: Assignment) -> str | None:
    """The platform's id of an assignment's work: MTurk's assignment id; on a panel the
    participant's submission (the session id of their entry), which the assignments of a
    bundle share; on the local channel, which has no platform, our own public id."""
    return getattr(assignment, ref_column(provider).key)


def ref_column(provider: str) -> Any:
    """The `Assignment` column that `platform_ref` reads, for queries."""
    channel = CHANNEL_OF[provider]
    if channel is Channel.panel:
        return Assignment.external_session_id
    if channel is Channel.local:
        return Assignment.public_id
    return Assignment.external_assignment_id


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
    MTurk's sync cleared `unverified`; a panel's sync listed the submission as handed in."""
    if not own or assignment.unverified:
        return False
    return CHANNEL_OF[provider] is not Channel.panel or assignment.review_status is not None
