"""Mechanical Turk as a crowd platform: what it can do and its own steps of publishing.

AWS's API reference announces that Mechanical Turk takes no new requesters since 30 July
2026 and closes on 30 September 2026: this path serves existing accounts, the sandbox,
MTurk-compatible endpoints and reproductions of the paper.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from app.crowd.base import CostEstimate, CrowdProvider, CrowdServiceError, PostingSpec
from app.crowd.platform import (
    PRODUCTION,
    QUALIFICATIONS,
    SANDBOX,
    Capabilities,
    Entry,
    Platform,
    ProviderOptions,
)
from app.models import Channel, Hit

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.config import Settings
    from app.models import CrowdPosting, Study


class MTurk(Platform):
    name = "mturk"
    label = "MTurk"
    channel = Channel.mturk
    container = "HIT type"
    approved_unit = "HITs"
    work_ref_key = "external_assignment_id"
    work_ref = "external_assignment_id"
    caps = Capabilities(
        fee_rule=(
            "20% of rewards and bonuses (40% for a HIT of 10 or more assignments, 5% more "
            "for Masters), at least 1 cent each; the sandbox charges nothing"
        ),
        environments=(SANDBOX, PRODUCTION),
        fee_per_unit_size=True,
        currency="$",
        qualifications=QUALIFICATIONS,
        qualifications_from_study=True,
        hides_at_cap=True,
        blocks_remotely=True,
        units_lapse=True,
        reopens=True,
        answers_on_platform=True,
        unverified_until_synced=True,
        batch_files=True,
        excludes_earlier="qualification",
    )

    def provider(self, settings: Settings, env: str | None, how: ProviderOptions) -> CrowdProvider:
        """The sandbox unless `environment="production"` and `EBC_MTURK_PRODUCTION` is on
        (real money); `EBC_MTURK_ENDPOINT_URL` replaces AWS's endpoint either way, except
        that one on AWS other than the sandbox's is production (real money), allowed only
        as the production environment (the setting, and the dashboard's typed
        confirmation). Credentials come from the AWS chain, never from settings."""
        from app.crowd.platforms.mturk.client import moves_real_money
        from app.crowd.platforms.mturk.provider import MTurkProvider

        environment = self.environment(env)
        if environment != PRODUCTION and moves_real_money(settings.mturk_endpoint_url):
            raise CrowdServiceError(
                f"EBC_MTURK_ENDPOINT_URL ({settings.mturk_endpoint_url}) is MTurk production, "
                "which moves real money: use the production environment (it needs "
                "EBC_MTURK_PRODUCTION and a confirmation), or unset it for the sandbox",
                403,
            )
        if environment == PRODUCTION and not settings.mturk_production:
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

    page_rank = 20
    status_note = (
        "Mechanical Turk has taken no new requesters since 30 July 2026 and its closure is "
        "announced for 30 September 2026: this channel stays for existing accounts, the "
        "sandbox and reproductions."
    )

    def ready(self, settings: Settings, environment: str) -> bool:
        return environment != PRODUCTION or settings.mturk_production

    def unready_reason(self, environment: str) -> str:
        return "production moves real money and is off on this server (EBC_MTURK_PRODUCTION)"

    def study_environment(self, study: Any) -> str:
        return SANDBOX if self.settings_of(study).get("sandbox", True) else PRODUCTION

    def entry_url(self, settings: Settings, study: Any) -> str | None:
        if not self.enabled(study):
            return None
        return f"{settings.base_url.rstrip('/')}/mturk/{study.slug}"

    def check_channel(self, study: Study, environment: str) -> None:
        if not self.enabled(study):
            raise CrowdServiceError(
                f"study {study.slug!r} does not take MTurk workers: enable its MTurk channel first",
                409,
            )
        if environment == PRODUCTION and self.settings_of(study).get("sandbox", True):
            raise CrowdServiceError(
                f"study {study.slug!r} is set to the MTurk sandbox (channels.mturk.sandbox); "
                "turn that off before publishing to production",
                409,
            )

    def entry(
        self, settings: Settings, study: Study, posting_settings: dict[str, Any], wanted: int
    ) -> Entry:
        # The ExternalQuestion's page; MTurk appends the worker's and assignment's ids.
        return Entry(f"{settings.base_url.rstrip('/')}/mturk/{study.slug}", None, wanted)

    def price(self, settings: Settings, spec: PostingSpec) -> Callable[..., CostEstimate]:
        from app.crowd.platforms.mturk.fees import price

        return functools.partial(price, spec)

    def publish_warnings(self, session: Session, study: Study, posting: CrowdPosting) -> list[str]:
        many = session.scalar(
            select(func.count()).where(Hit.study_id == study.id, Hit.replicas >= 10)
        )
        if many:
            return [f"{many} HITs have 10 or more assignments: MTurk charges a 40% fee on them"]
        return []


PLATFORM = MTurk()
