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
)
from app.crowd.registry import platform
from app.models import CrowdPosting, Hit, Study, StudyStatus, User, utcnow


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
    made = platform(provider.name)
    made.check_channel(study, provider.environment)
    if study.status is not StudyStatus.collecting:
        raise CrowdServiceError(
            f"study {study.slug!r} is {study.status.value}: open it to annotators first", 409
        )
    wanted = resolved_options(study, options or PublishOptions(), provider)
    posting = find_posting(session, study, provider.name, provider.environment)
    if posting is not None:
        check_not_preparing(posting, utcnow())
    bundle = int(getattr(provider, "hits_per_participant", 1))
    made.check_posting(session, study, posting, bundle)
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
_OWN_KEYS = ("cap_qualification_id", "exclusion_qualification_id", PREPARING)


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

    HITs are priced in groups of equal replicas where the fee depends on the assignments
    per platform unit (`price_groups`).
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

    Where the fee depends on the assignments per platform unit (`Capabilities.fee_per_unit_
    size`, MTurk: 10 or more cost more) each group is priced apart, its size passed as
    `max_assignments` (a keyword of such a platform's `price` only); elsewhere the
    assignments are priced together.
    """
    if not platform(provider).caps.fee_per_unit_size:
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
