"""The local channel (invite links for lab members) as a crowd provider, so that a lab
study is published, synced, reviewed and paid through the same services, ledger and
Crowd page as MTurk and Prolific (`ebc crowd ... --provider local`).

There is no platform: our own store is the source of truth, and lab annotators are paid
off-platform. So every call maps to bookkeeping that the crowd services already do:

- **publish** records the posting (environment "local", its id `local-{key}`) and one
  unit per HIT whose id is our own HIT's public id (`common.hit_public_id`); the study is
  open to its invited annotators as it always is. Invite links are made by the existing
  invitation service (`ebc crowd publish --provider local --invites N` prints N new ones;
  the Annotators page makes them too): publishing makes none by itself, since a lab
  usually has its people invited already;
- **sync** lists the study's submitted work of invited annotators on the posting's HITs
  (read from our store; never a simulated crowd's, which nobody reviews or pays) as
  submissions, so the sync claims it for the posting and the payment state of each
  assignment is tracked as on a platform ("to review" after a sync);
- **approve, reject, bonus** do nothing here: the ledger (`crowd_calls`) records each
  call once, with its audit entry, and the review or bonus on the assignment;
- **block, unblock**: the ledger applies our own block (`annotation.admin.block`), which
  stops the annotator's future work;
- **expire**: the ledger closes the posting; an invite link then takes no new work
  (`annotation.leases`), a lease already held can still be handed in; publishing again
  reopens it (a ledgered `reopen`, as on MTurk), its units too (so it can be expired
  again);
- **estimate**: the rewards (reward x assignments), no platform fee; **balance**: None,
  shown as "not applicable".

The one thing this provider reads is our store, through the session factory it is given
(read-only, its own unit of work): it writes nothing and never commits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.crowd.base import CostEstimate, PlatformSubmission, PostingSpec, UnitToPublish
from app.db import unit_of_work
from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    Channel,
    CrowdHit,
    CrowdPosting,
    ReviewStatus,
)

# Our review of the work, in the platform words the sync reads (`sync.REVIEW_OF`).
_STATUS = {ReviewStatus.approved: "Approved", ReviewStatus.rejected: "Rejected"}
NO_FEE = "lab annotators are paid off-platform: no platform fee"


def price(spec: PostingSpec, assignments: int, *, bonus_cents: int = 0) -> CostEstimate:
    """What the lab pays its annotators for `assignments` assignments: the spec's reward
    each, and the bonuses; no platform fee (as the platforms' `fees.price`, with no
    client)."""
    return CostEstimate(spec.reward_cents * assignments, 0, bonus_cents, (NO_FEE,))


class LocalProvider:
    """The `CrowdProvider` of the local channel. See the module docstring."""

    name = "local"
    environment = "local"

    def __init__(self, sessions: Callable[[], Session]) -> None:
        self._sessions = sessions

    def estimate_cost(
        self, spec: PostingSpec, assignments: int, *, bonus_cents: int = 0
    ) -> CostEstimate:
        return price(spec, assignments, bonus_cents=bonus_cents)

    def balance_cents(self) -> int | None:
        return None  # not applicable: nothing is paid through us

    def prepare(self, spec: PostingSpec) -> str:
        return f"local-{spec.key}"

    def publish(self, external_id: str, spec: PostingSpec, unit: UnitToPublish) -> str:
        return unit.hit_public_id

    def submissions(
        self, external_id: str, unit_external_ids: Sequence[str]
    ) -> Iterator[PlatformSubmission]:
        """Every submitted assignment of an invited annotator on a unit of the posting,
        with our review of it (none yet: "Submitted"). A simulated annotator's work
        (`annotators.simulated`) is never listed: there is nobody to review or pay."""
        units = set(unit_external_ids)
        with unit_of_work(self._sessions) as session:
            rows = session.execute(
                select(Assignment, Annotator.external_id, CrowdHit.external_hit_id)
                .join(CrowdHit, CrowdHit.hit_id == Assignment.hit_id)
                .join(CrowdPosting, CrowdPosting.id == CrowdHit.posting_id)
                .join(Annotator, Annotator.id == Assignment.annotator_id)
                .where(
                    CrowdPosting.provider == self.name,
                    CrowdPosting.external_id == external_id,
                    Annotator.channel == Channel.local,
                    Annotator.simulated.is_(False),  # nobody to review or pay
                    Assignment.status == AssignmentStatus.submitted,
                )
                .order_by(Assignment.id)
            ).all()
            found = [
                PlatformSubmission(
                    external_assignment_id=a.public_id,
                    external_worker_id=worker or "",
                    external_hit_id=unit,
                    status=_STATUS.get(a.review_status, "Submitted"),
                    submitted_at=a.submitted_at,
                )
                for a, worker, unit in rows
                if unit in units
            ]
        return iter(found)

    # Bookkeeping only: the ledger records each call and applies its outcome here.

    def approve(self, external_assignment_id: str, *, feedback: str | None = None) -> None:
        pass

    def reject(self, external_assignment_id: str, *, feedback: str) -> None:
        pass

    def bonus(self, worker: str, work: str, cents: int, *, reason: str, request_token: str) -> None:
        pass

    def block(self, external_worker_id: str, *, reason: str) -> None:
        pass

    def unblock(self, external_worker_id: str, *, reason: str) -> None:
        pass

    def expire(self, external_id: str, unit_external_ids: Sequence[str]) -> None:
        pass

    def reopen(
        self, external_id: str, unit_external_ids: Sequence[str], lifetime_seconds: int
    ) -> None:
        pass
