"""Prolific as a crowd platform: what it can do and its own steps of publishing.

One of our studies is one Prolific study (one unit, whatever the number of HITs); a
place is one participant, who does one HIT or a bundle of them (`hits_per_participant`)
and ends with the completion code. Once the Prolific study is published, the study's
entry demands its id (`channels.prolific.study_id`, `after_publish`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from app.crowd.base import CostEstimate, CrowdError, CrowdProvider, CrowdServiceError, PostingSpec
from app.crowd.platform import (
    PRODUCTION,
    SANDBOX,
    Capabilities,
    Entry,
    Platform,
    ProviderOptions,
    wanted_assignments,
)
from app.crowd.platforms.prolific.api import REJECTION_MESSAGE_MIN, RejectionCategory
from app.crowd.platforms.prolific.entry import entry_url, placeholder_url
from app.crowd.platforms.prolific.fees import places_for
from app.models import Channel, CrowdHit

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.audit.service import Actor
    from app.config import Settings
    from app.models import CrowdPosting, Study


class Prolific(Platform):
    name = "prolific"
    label = "Prolific"
    channel = Channel.prolific
    # Before one name: the channel was "panel" (a study file's `[channels.panel]`).
    former_names = ("panel",)
    container = "Prolific study"
    work_ref = "external_session_id"
    never_stored_category = RejectionCategory.NO_DATA.value
    caps = Capabilities(
        fee_rule=(
            "the workspace's platform fee (EBC_PROLIFIC_FEE_RATE: 42.8% corporate, 33.3% "
            "academic) on rewards and bonuses; VAT on top where it applies; no sandbox"
        ),
        qualifications=("min_approval_rate", "min_approved"),
        bundles=True,
        review_unit="submission",
        completion_code=True,
        units="study",
        rejection_min_chars=REJECTION_MESSAGE_MIN,
        rejection_categories=tuple(c.value for c in RejectionCategory),
        prescreeners=("first_languages", "fluent_languages", "countries", "min_approval_rate"),
        excludes_earlier="previous-studies blocklist",
    )

    def provider(self, settings: Settings, env: str | None, how: ProviderOptions) -> CrowdProvider:
        """Production only (Prolific has no sandbox), from the `EBC_PROLIFIC_*` settings;
        `hits_per_participant` > 1 makes one place a bundle of that many HITs."""
        from app.crowd.platforms.prolific.provider import ProlificProvider

        environment = self.environment(env)
        if environment != PRODUCTION:
            raise CrowdServiceError(
                "Prolific has no sandbox: use its production API (a test study)"
            )
        try:
            return ProlificProvider.from_settings(
                settings, environment=environment, hits_per_participant=how.hits_per_participant
            )
        except CrowdError as exc:
            raise CrowdServiceError(str(exc), 400) from exc

    def environment_refused(self, environment: str) -> str:
        if environment == SANDBOX:
            return "Prolific has no sandbox: run a small test study on Prolific itself."
        return super().environment_refused(environment)

    page_rank = 10

    def ready(self, settings: Settings, environment: str) -> bool:
        return settings.prolific_api_token is not None

    def unready_reason(self, environment: str) -> str:
        return "no Prolific API token on this server (EBC_PROLIFIC_API_TOKEN)"

    def prescreeners_of(self, study: Any) -> dict[str, Any]:
        wanted = self.settings_of(study).get("prescreeners") or {}
        return {
            k: v for k, v in wanted.items() if k in self.caps.prescreeners and v not in (None, [])
        }

    def entry_url(self, settings: Settings, study: Any) -> str | None:
        if not self.enabled(study):
            return None
        return entry_url(settings.base_url, settings.secret_key, study)

    def check_channel(self, study: Study, environment: str) -> None:
        channel = self.settings_of(study)
        if not channel.get("enabled"):
            raise CrowdServiceError(
                f"study {study.slug!r} does not take Prolific participants: enable its "
                "Prolific channel first",
                409,
            )
        if not channel.get("completion_code"):
            raise CrowdServiceError(
                f"study {study.slug!r} has no Prolific completion code: set "
                "channels.prolific.completion_code (the code its last page shows)",
                409,
            )

    def check_posting(
        self, session: Session, study: Study, posting: CrowdPosting | None, bundle: int
    ) -> None:
        """HITs to fill places with; a bundle size that the posting was made with; and no
        other Prolific study named in the study's settings, whose id our entry would demand
        of every participant (all of them would be refused)."""
        if wanted_assignments(session, study) < 1:
            raise CrowdServiceError(f"study {study.slug!r} has no HITs to publish: build them", 409)
        made_with = int((posting.settings if posting else {}).get("hits_per_participant") or bundle)
        if posting is not None and posting.external_id is not None and made_with != bundle:
            raise CrowdServiceError(
                f"this Prolific study was published with {made_with} HITs per participant, "
                f"not {bundle}",
                409,
            )
        expected = self.settings_of(study).get("study_id")
        if expected and expected != (posting.external_id if posting else None):
            raise CrowdServiceError(
                f"study {study.slug!r} names Prolific study {expected} "
                "(channels.prolific.study_id) and its entries must carry that id: clear it to "
                "publish a new Prolific study",
                409,
            )

    def places(self, assignments: int, hits_per_participant: int = 1) -> int:
        return places_for(assignments, hits_per_participant)

    def entry(
        self, settings: Settings, study: Study, posting_settings: dict[str, Any], wanted: int
    ) -> Entry:
        # A place is one participant, who does a bundle of HITs.
        bundle = int(posting_settings.get("hits_per_participant") or 1)
        return Entry(
            placeholder_url(settings.base_url, settings.secret_key, study),
            self.settings_of(study).get("completion_code"),
            places_for(wanted, bundle),
        )

    def price(self, settings: Settings, spec: PostingSpec) -> Callable[..., CostEstimate]:
        from app.crowd.platforms.prolific.fees import price

        return functools.partial(price, spec, fee_rate=settings.prolific_fee_rate)

    def publish_warnings(self, session: Session, study: Study, posting: CrowdPosting) -> list[str]:
        out = []
        asked = session.scalar(
            select(CrowdHit.max_assignments).where(CrowdHit.posting_id == posting.id)
        )
        wanted = places_for(
            wanted_assignments(session, study),
            int(posting.settings.get("hits_per_participant") or 1),
        )
        if asked is not None and wanted > asked:
            out.append(
                f"the study now needs {wanted} Prolific places, the Prolific study has {asked}: "
                "add places to it on Prolific"
            )
        return out

    def after_publish(
        self, session: Session, study: Study, posting: CrowdPosting, by: Actor | None
    ) -> list[str]:
        """Once the Prolific study is published, the study's entry demands its id
        (`channels.prolific.study_id`): entries from any other Prolific study are refused.
        Audited. A study that names another Prolific study keeps it (with a warning);
        `check_posting` refuses to publish one (409) before anything is made."""
        from app.audit.service import record_by

        channel = self.settings_of(study)
        current = channel.get("study_id")
        if current == posting.external_id:
            return []
        if current:
            return [
                f"the study names Prolific study {current} (channels.prolific.study_id), not "
                f"{posting.external_id}: entries from this one are refused"
            ]
        study.channels = {
            **study.channels,
            self.name: {**channel, "study_id": posting.external_id},
        }
        session.flush()
        record_by(
            session,
            by or "system",
            "crowd_prolific_study_set",
            study=study,
            provider=posting.provider,
            study_id=posting.external_id,
        )
        return []


PLATFORM = Prolific()
