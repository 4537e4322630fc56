"""What a crowd platform declares: its capabilities (`Capabilities`) and its hooks into the
crowd service (`Platform`), so that the services, the dashboard, the templates and the
CLI ask a platform what it can do and never test its name.

A platform is one package under `app/crowd/platforms/` (its client of the platform's API,
its `CrowdProvider`, its fee rule and a `platform` module whose `PLATFORM` is an instance
of a `Platform` subclass) plus one line in `app.crowd.registry`. Its `name` is its one
name everywhere: `CrowdPosting.provider`, the annotators' channel (`Channel`), the study
file's section (`[channels.<name>]`), `--provider` and `?provider=`.

Capabilities are data (a table a researcher can read: `ebc crowd platforms`); hooks are
the few steps that are a platform's own (checking its channel settings before publishing,
the URL its workers enter by, what it warns about), with defaults for a platform that has
nothing to add. A hook never commits; those that take a `Session` only flush.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from sqlalchemy import func, select

from app.crowd.base import CostEstimate, CrowdProvider, CrowdServiceError, PostingSpec
from app.models import Channel, Hit

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.audit.service import Actor
    from app.config import Settings
    from app.models import CrowdPosting, Study

SANDBOX = "sandbox"
PRODUCTION = "production"
# The two environments of a platform that has a sandbox; a platform's own environments
# are `Capabilities.environments`.
ENVIRONMENTS = (SANDBOX, PRODUCTION)
# The requirements a posting may set (`common.PublishOptions`); a platform applies those
# it lists in `Capabilities.qualifications`.
QUALIFICATIONS = ("min_approval_rate", "min_approved", "locales", "masters")


def wanted_assignments(session: Session, study: Study) -> int:
    """HIT assignments the study wants: the sum of its HITs' replicas."""
    return int(
        session.scalar(
            select(func.coalesce(func.sum(Hit.replicas), 0)).where(Hit.study_id == study.id)
        )
    )


@dataclass(frozen=True)
class Capabilities:
    """What a platform can do. Each field is read by the code named with it; a platform
    declares those where it differs from the defaults (a platform reached by calls, in
    production only, with none of the optional abilities)."""

    # How it charges (its `fees.price` computes it; shown by `ebc crowd platforms`).
    fee_rule: str
    # Its calls reach a platform: paced, an account balance, fees, a reward required,
    # listing options (lifetime, automatic approval). False: our own store is the
    # "platform" (invite links), every call is bookkeeping, an expiry is enforced by us.
    remote: bool = True
    # Its environments, the default first; `sandbox` is a free copy of production.
    environments: tuple[str, ...] = (PRODUCTION,)
    # Its fee depends on the assignments per platform unit (MTurk: 10 or more cost more),
    # so HITs are priced in groups of equal replicas (`postings.price_groups`).
    fee_per_unit_size: bool = False
    # The sign its money is shown with ("$"); "" where the workspace's currency decides.
    currency: str = ""
    # The requirements of `QUALIFICATIONS` it applies (the publish form shows those).
    qualifications: tuple[str, ...] = ()
    # The study file's channel section sets them (`common.study_qualifications`).
    qualifications_from_study: bool = False
    # Workers at the per-annotator cap stop seeing the study (a `CapQualifying` provider).
    hides_at_cap: bool = False
    # One participant may do a bundle of HITs for one reward (`hits_per_participant`).
    bundles: bool = False
    # What it reviews and pays: each `assignment`, or a participant's `submission` (their
    # whole visit, which the assignments of a bundle share; confirmed once a sync lists it,
    # bonuses per participant).
    review_unit: Literal["assignment", "submission"] = "assignment"
    # A block reaches the platform (it blocks the worker from all of the account's work);
    # else a block is our own only (the platform has no block call, or there is none).
    blocks_remotely: bool = False
    # Participants end with a completion code (and the study's redirect).
    completion_code: bool = False
    # A platform unit per `hit` of ours, or one for the whole `study`.
    units: Literal["hit", "study"] = "hit"
    # Units stop taking work by themselves when the posting's lifetime has passed.
    units_lapse: bool = False
    # An expired posting can be listed again (a `Reopening` provider); else publishing
    # an expired posting is refused.
    reopens: bool = False
    # The platform keeps a copy of the answers that a sync can recover (`recovery`).
    answers_on_platform: bool = False
    # Work is stored `unverified` and counts once a sync confirmed it through the API.
    unverified_until_synced: bool = False
    # Workers enrol themselves through a public URL (identities made on entry, rate
    # limited per address and study).
    self_enrolment: bool = True
    # The offline batch files (HIT template + input CSV, results CSV: `batch`, `imports`)
    # are in its format.
    batch_files: bool = False
    # What a rejection must carry: a message of at least this many characters, and one
    # of these categories (none: the platform has no categories).
    rejection_min_chars: int = 0
    rejection_categories: tuple[str, ...] = ()
    # The study file's prescreeners of this platform that it applies at publishing
    # (`Platform.prescreeners_of`; Prolific's filters); none: it has none of its own.
    prescreeners: tuple[str, ...] = ()
    # How the platform itself keeps out the people of the earlier studies a study excludes
    # (`participants.exclude_studies`), besides our records, which refuse them at entry on
    # every channel: "previous-studies blocklist" (Prolific), "qualification" (MTurk); "":
    # our records only (invite links, imported batch files).
    excludes_earlier: str = ""


@dataclass(frozen=True)
class ProviderOptions:
    """How a provider is made besides its environment (`Platform.provider`)."""

    # A bundle of HITs per place, on a platform that has them (`Capabilities.bundles`).
    hits_per_participant: int = 1
    # The caller's session factory, for a platform whose "platform" is our store (local).
    sessions: Callable[[], Session] | None = None


@dataclass(frozen=True)
class Entry:
    """How workers reach a posting: the URL the platform sends them to, the completion
    code they end with, and the places (participants) asked for."""

    url: str
    completion_code: str | None
    places: int


class Platform:
    """A crowd platform's declaration. Subclass it in the platform's `platform` module."""

    name: ClassVar[str]  # the one name (see the module)
    label: ClassVar[str]  # how pages name it: "MTurk", "Prolific"
    channel: ClassVar[Channel]  # its annotators' channel (`Channel(name)`)
    caps: ClassVar[Capabilities]
    # Names the platform had before (a study file's `[channels.<former>]` is read as its).
    former_names: ClassVar[tuple[str, ...]] = ()
    # Words of its pages: what its container is called, what approved work is counted in,
    # and the audit detail key of the platform's id of the work.
    container: ClassVar[str] = "posting"
    approved_unit: ClassVar[str] = "submissions"
    work_ref_key: ClassVar[str] = "submission"
    # The `Assignment` column that holds the platform's id of the work (`common.ref_column`).
    work_ref: ClassVar[str]
    # The rejection category of a submission we never stored (the dashboard's form).
    never_stored_category: ClassVar[str | None] = None
    # Where the Crowd page puts it (lowest first: the platforms crowds use today first); it
    # opens on the first the study enables (`app.crowd.registry.page_order`).
    page_rank: ClassVar[int] = 50
    # What the Crowd page says of the platform itself besides its settings (its closure).
    status_note: ClassVar[str] = ""

    # -- the provider --------------------------------------------------------------------

    def provider(self, settings: Settings, env: str | None, how: ProviderOptions) -> CrowdProvider:
        """Its `CrowdProvider` for environment `env` (None: the default), made `how`, or a
        `CrowdServiceError` where the settings do not allow it."""
        raise NotImplementedError

    def environment(self, environment: str | None) -> str:
        """`environment`, or the default; refused (400) if it is none of the platform's."""
        environment = environment or self.caps.environments[0]
        if environment not in ENVIRONMENTS:
            raise CrowdServiceError(f"unknown environment {environment!r}: sandbox or production")
        return environment

    def environment_refused(self, environment: str) -> str:
        """What the dashboard says when asked for an environment the platform lacks."""
        return (
            "The local channel (invite links) has one environment, local; the platforms "
            "have sandbox and production."
        )

    def ready(self, settings: Settings, environment: str) -> bool:
        """Whether this server may act on the platform in `environment` (else its Crowd page
        only shows what is recorded, with the platform's notice)."""
        return True

    def unready_reason(self, environment: str) -> str:
        """Why this server may not act there (`ready` is False), in a few words."""
        return "this server is not set up for it"

    # -- the study's channel -------------------------------------------------------------

    def settings_of(self, study: Any) -> dict:
        """The study's settings of this platform (`channels.<name>`), {} when it has none."""
        return (study.channels or {}).get(self.name) or {}

    def enabled(self, study: Any) -> bool:
        """Whether the study takes workers through this platform (channels are opt-in)."""
        return bool(self.settings_of(study).get("enabled"))

    def off_reason(self, study: Any, settings: Settings, environment: str) -> str | None:
        """Why the study's Crowd page cannot publish here (None: it can)."""
        if not self.enabled(study):
            return (
                f"the study does not enable it (set [channels.{self.name}] enabled = true in "
                "the study file)"
            )
        if not self.ready(settings, environment):
            return self.unready_reason(environment)
        return None

    def study_environment(self, study: Any) -> str:
        """The environment the study file points the platform at (previews price it)."""
        return self.caps.environments[0]

    def counts_work(self, study: Any, environment: str) -> bool:
        """Whether work synced from a posting in `environment` counts for the study: sandbox
        work only while the study itself is in the sandbox (`channels.<name>.sandbox`)."""
        return environment != SANDBOX or bool(self.settings_of(study).get("sandbox", True))

    def prescreeners_of(self, study: Any) -> dict[str, Any]:
        """The study file's prescreeners that this platform applies (`caps.prescreeners`),
        those set only ({}: none)."""
        return {}

    def entry_url(self, settings: Settings, study: Any) -> str | None:
        """The URL researchers give the platform (the Annotators page); None: none (the
        channel is off, or workers have links of their own)."""
        return None

    # -- publishing ----------------------------------------------------------------------

    def check_channel(self, study: Study, environment: str) -> None:
        """Refuse (409) to publish a study whose channel settings do not allow it."""

    def check_posting(
        self, session: Session, study: Study, posting: CrowdPosting | None, bundle: int
    ) -> None:
        """Refuse (409) a posting the platform cannot take (`bundle`: the provider's HITs
        per participant)."""

    def places(self, assignments: int, hits_per_participant: int = 1) -> int:
        """The places (participants) `assignments` HIT assignments need."""
        return assignments

    def entry(
        self, settings: Settings, study: Study, posting_settings: dict[str, Any], wanted: int
    ) -> Entry:
        """How workers reach the study's posting (`PostingSpec`'s entry URL, completion
        code and places); `wanted`: the HIT assignments the study wants."""
        return Entry("", None, wanted)

    def price(self, settings: Settings, spec: PostingSpec) -> Callable[..., CostEstimate]:
        """Its fee rule for `spec`, without a client: `price(assignments, bonus_cents=...)`."""
        raise NotImplementedError

    def publish_warnings(self, session: Session, study: Study, posting: CrowdPosting) -> list[str]:
        """What a publish run warns about before it starts."""
        return []

    def after_publish(
        self, session: Session, study: Study, posting: CrowdPosting, by: Actor | None
    ) -> list[str]:
        """A step once the posting has units on the platform (flushes only); warnings."""
        return []
