"""The provider interface every crowd platform implements (`app.crowd.platforms`).

A provider is a thin, typed client of one platform. It holds no database state and
never commits: the crowd service (`app.crowd.publishing`, `sync`, `payments`) decides
what to call, records each call in the ledger (`CrowdCall`, `CrowdHit`) before making
it, and records the outcome after.
Providers therefore must:

- raise `CrowdError` (or a subclass) on every failure, with the platform's message;
  never return a "failed" value silently (money calls never swallow an error);
- treat the caller's `request_token` as the idempotency key wherever the platform
  has one (MTurk `UniqueRequestToken`), and report "already done" as success
  (`AlreadyDone`) where the platform says so (MTurk `HitAlreadyExists`, an
  assignment already approved);
- never reveal an item's kind or the model's ranking to the platform: they publish
  opaque ids and our annotator URLs only.

Money is in integer cents in our code; providers convert at their edge (MTurk wants a
decimal string such as "0.50").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable


class CrowdError(Exception):
    """A platform call failed; `code` is the platform's error code when it gave one.

    `maybe_done`: the call may have reached the platform and taken effect (a lost answer
    to a call that is not idempotent there); the ledger then treats its outcome as unknown.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retryable: bool = False,
        maybe_done: bool = False,
    ):
        super().__init__(message)
        self.code = code
        self.retryable = retryable
        self.maybe_done = maybe_done


class CrowdServiceError(Exception):
    """A crowd request that cannot be carried out (a 4xx: nothing was changed)."""

    def __init__(self, message: str, status_code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


class AlreadyDone(CrowdError):
    """The platform reports that this exact call was already made (a success for us)."""


class Unsupported(CrowdError):
    """The platform has no such call (Prolific: no block): nothing was done there."""


@dataclass(frozen=True)
class Qualifications:
    """Who may work: the study's requirements, in the platform's neutral terms."""

    min_approval_rate: int | None = None  # percent
    min_approved: int | None = None  # number of approved HITs
    locales: tuple[str, ...] = ()  # ISO 3166 country codes, e.g. ("US", "GB")
    masters: bool = False
    # A custom "reached the cap" qualification the worker must NOT have (MTurk).
    cap_qualification_id: str | None = None
    # A custom "took part in an earlier study" qualification the worker must NOT have
    # (MTurk: granted to the earlier studies' workers, `ExclusionQualifying`).
    exclusion_qualification_id: str | None = None


@dataclass(frozen=True)
class PostingSpec:
    """What a study is published as (one per study and platform environment)."""

    study_slug: str
    title: str
    description: str
    reward_cents: int  # per assignment (one HIT)
    assignment_seconds: int  # how long a worker may hold one
    lifetime_seconds: int  # how long it stays listed
    auto_approve_seconds: int
    keywords: tuple[str, ...] = ()
    qualifications: Qualifications = field(default_factory=Qualifications)
    entry_url: str = ""  # our annotator URL for this channel (https in production)
    completion_code: str | None = None  # Prolific
    places: int = 0  # Prolific: participants wanted
    minutes_estimate: int = 5
    # The posting's own key (a hash of the study's id, slug and creation time, the
    # platform and environment): what the platform's names of it carry (the Prolific
    # study's internal name, the cap qualification's name), so that two databases or a
    # study re-created under the same slug never share them.
    key: str = ""
    # Who may take part, issue 33 (`app.crowd.audience`): the platform's prescreeners from
    # the study file (`Platform.prescreeners_of`), and the people of the earlier studies
    # the study excludes: their units on this platform (a Prolific study's id: its
    # previous-studies blocklist) and their worker ids (an MTurk exclusion qualification).
    prescreeners: dict[str, Any] = field(default_factory=dict)
    exclude_units: tuple[str, ...] = ()
    exclude_workers: tuple[str, ...] = ()


@dataclass(frozen=True)
class UnitToPublish:
    """One of our HITs to put on a platform (MTurk: one platform HIT each)."""

    hit_id: int
    hit_public_id: str  # opaque: nothing about kinds or ranks
    max_assignments: int
    request_token: str  # deterministic, at most 64 characters


@dataclass(frozen=True)
class PlatformSubmission:
    """One worker's submitted (or reviewed) assignment as the platform lists it."""

    external_assignment_id: str
    external_worker_id: str
    external_hit_id: str | None
    status: str  # the platform's status word, e.g. Submitted, Approved, Rejected
    submitted_at: datetime | None = None
    # Our HIT id as the platform echoes it back (MTurk RequesterAnnotation).
    requester_annotation: str | None = None
    # The answer the platform holds, when it carries one (MTurk answer XML), parsed to
    # field name -> value; None when the platform holds no answers (Prolific).
    answers: dict[str, str] | None = None


@dataclass(frozen=True)
class CostEstimate:
    """What publishing costs, as the platform would charge it (cents)."""

    rewards_cents: int
    fees_cents: int
    bonuses_cents: int = 0
    notes: tuple[str, ...] = ()  # e.g. "10 or more assignments per HIT: 40% fee"

    @property
    def total_cents(self) -> int:
        return self.rewards_cents + self.fees_cents + self.bonuses_cents


@runtime_checkable
class CrowdProvider(Protocol):
    """One crowd platform. See the module docstring for the rules every method keeps."""

    name: str  # its platform's name (`app.crowd.registry`)
    environment: str  # "sandbox" or "production"

    def estimate_cost(
        self, spec: PostingSpec, assignments: int, *, bonus_cents: int = 0
    ) -> CostEstimate: ...

    def balance_cents(self) -> int | None:
        """The account's available balance, or None where the platform has none to show."""
        ...

    def prepare(self, spec: PostingSpec) -> str:
        """Create what every unit hangs off (MTurk HIT type, Prolific draft study); its id."""
        ...

    def publish(self, external_id: str, spec: PostingSpec, unit: UnitToPublish) -> str:
        """Put one unit on the platform; the platform's id for it. Idempotent by token."""
        ...

    def submissions(
        self, external_id: str, unit_external_ids: Sequence[str]
    ) -> Iterator[PlatformSubmission]:
        """Every submitted or reviewed assignment, all pages, all statuses we act on."""
        ...

    def approve(self, external_assignment_id: str, *, feedback: str | None = None) -> None: ...

    def reject(self, external_assignment_id: str, *, feedback: str) -> None: ...

    def bonus(self, worker: str, work: str, cents: int, *, reason: str, request_token: str) -> None:
        """Pay `cents` to `worker` on `work` (the platform's id of the work), at most once
        for `request_token`; `reason` is what the worker reads."""
        ...

    def block(self, external_worker_id: str, *, reason: str) -> None: ...

    def unblock(self, external_worker_id: str, *, reason: str) -> None: ...

    def expire(self, external_id: str, unit_external_ids: Sequence[str]) -> None:
        """Stop new work: expire every listed unit (or stop the Prolific study)."""
        ...


@runtime_checkable
class ExclusionQualifying(Protocol):
    """Optional: a platform on which a qualification keeps out the workers of earlier
    studies (MTurk): a type of the posting's own, granted to each of them silently; the
    HIT type requires that it does not exist."""

    def exclusion_qualification(self, spec: PostingSpec) -> str:
        """The posting's "took part before" qualification type, made once and granted to
        `spec.exclude_workers` (each grant may be repeated); its id."""
        ...


@runtime_checkable
class CapQualifying(Protocol):
    """Optional: a platform that can stop showing a study to workers at the cap (MTurk).

    Our server enforces the per-annotator cap whatever the platform does (a worker may
    already hold accepted HITs); this only spares workers HITs they could not do.
    """

    def cap_qualification(self, spec: PostingSpec) -> str:
        """The study's "reached the cap" qualification type, made once; its id."""
        ...

    def grant_cap(self, qualification_id: str, external_worker_id: str) -> None:
        """Give the worker the cap qualification, without notifying them."""
        ...


@runtime_checkable
class Reopening(Protocol):
    """Optional: list again the units that `expire` took down (MTurk: a future expiry
    for each HIT; the local channel: its invite links take new work again). A platform
    without it (Prolific stops a study for good) cannot take an expired posting live
    again: publishing it again is refused."""

    def reopen(
        self, external_id: str, unit_external_ids: Sequence[str], lifetime_seconds: int
    ) -> None:
        """Make every listed unit take new work for `lifetime_seconds` from now."""
        ...


@runtime_checkable
class UnitLookup(Protocol):
    """Optional: find a unit that a call may have made before it was interrupted.

    A platform's idempotency token may lapse (MTurk: 24 hours), so a publish that was
    interrupted (the platform may have made the unit; we never heard back) looks first.
    """

    def find_published(self, external_id: str, unit: UnitToPublish) -> str | None: ...


@runtime_checkable
class PreparedLookup(Protocol):
    """Optional: find the container (`prepare`) that an interrupted attempt may have made,
    for a platform whose create call is not idempotent (a Prolific study, by the internal
    name that carries `spec.key`). None when there is none."""

    def find_prepared(self, spec: PostingSpec) -> str | None: ...


@runtime_checkable
class PaidBonuses(Protocol):
    """Optional: the bonuses paid on a submission (MTurk: an assignment), in cents. The
    ledger asks before it retries a bonus whose earlier attempt may have been paid: a
    platform whose bonus call has no idempotency key (Prolific), or one whose key lapses
    (MTurk forgets a UniqueRequestToken after 24 hours), so a bonus is never paid twice.

    `bonuses_listed_at_once`: a payment made is listed as soon as the call returns (MTurk),
    so one not listed was not made; False where payments are listed later (Prolific pays
    a bulk bonus asynchronously), so only a listed payment proves anything.
    """

    bonuses_listed_at_once: bool

    def submission_bonuses_cents(self, submission_id: str) -> list[int]: ...
