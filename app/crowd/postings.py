"""A study's posting on a crowd platform: the checks before publishing, the posting made
once with its settings (`open_posting`), and the cost estimate (`estimate`, over the
study's HITs; `price_groups`, over any layout of HITs). Steps: they take a `Session` and
only flush.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.audit.service import Actor
from app.config import Settings
from app.crowd.base import CostEstimate, CrowdProvider
from app.crowd.claims import PREPARING, check_not_preparing
from app.crowd.common import (
    CrowdServiceError,
    PublishOptions,
    find_posting,
    posting_spec,
    resolved_options,
    wanted_assignments,
)
from app.models import CrowdPosting, Hit, Study, StudyStatus, User, utcnow


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
    published carry the old ones; so is any change while another run prepares it (409).
    """
    _check_channel(study, provider)
    if study.status is not StudyStatus.collecting:
        raise CrowdServiceError(
            f"study {study.slug!r} is {study.status.value}: open it to annotators first", 409
        )
    wanted = resolved_options(study, options or PublishOptions(), provider)
    posting = find_posting(session, study, provider.name, provider.environment)
    if posting is not None:
        check_not_preparing(posting, utcnow())
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
        ours = {k: v for k, v in posting.settings.items() if k in _OWN_KEYS}
        kept = {k: v for k, v in posting.settings.items() if k not in _OWN_KEYS}
        if posting.external_id is not None and kept != wanted:
            raise CrowdServiceError(
                "this study is already published with other settings; its HITs keep them",
                409,
            )
        if posting.external_id is None:
            posting.settings = {**wanted, **ours}
            session.flush()
    return posting


# Settings the service keeps on a posting besides the publish options.
_OWN_KEYS = ("cap_qualification_id", PREPARING)


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
    return price_groups(
        provider.name,
        functools.partial(provider.estimate_cost, spec),
        [(int(r), int(n)) for r, n in groups],
        bonus_cents=bonus_cents,
    )


def price_groups(
    provider: str,
    price: Callable[..., CostEstimate],
    groups: Sequence[tuple[int, int]],
    *,
    bonus_cents: int = 0,
) -> CostEstimate:
    """The cost of HITs grouped as `(replicas, HITs)`, by a provider's `price(assignments,
    bonus_cents=...)` (its `estimate_cost` with the spec bound, or its module's `price`).

    On MTurk each group is priced apart, since its fee depends on the assignments per HIT
    (10 or more cost more: `max_assignments`, an MTurk-only keyword); elsewhere the
    assignments are priced together.
    """
    if provider != "mturk":
        assignments = sum(r * n for r, n in groups)
        return price(assignments, bonus_cents=bonus_cents)
    total = CostEstimate(0, 0, 0)
    notes: list[str] = []
    for i, (replicas, n) in enumerate(sorted(groups)):
        part = price(
            replicas * n, bonus_cents=bonus_cents if i == 0 else 0, max_assignments=replicas
        )
        total = CostEstimate(
            total.rewards_cents + part.rewards_cents,
            total.fees_cents + part.fees_cents,
            total.bonuses_cents + part.bonuses_cents,
        )
        notes += [note for note in part.notes if note not in notes]
    if not groups and bonus_cents:
        total = price(0, bonus_cents=bonus_cents)
        notes = list(total.notes)
    return CostEstimate(total.rewards_cents, total.fees_cents, total.bonuses_cents, tuple(notes))
