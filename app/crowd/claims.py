"""Who acts on a posting now: writer units of work, row locks, and the claims a publish
run commits before a platform call (the posting's "preparing", each unit's `sending`).

- **Writers.** Every driver unit of work that writes starts as a writer (`writing`): on
  SQLite a transaction that read first cannot become a writer once an annotator's request
  committed meanwhile ("database is locked" at once, no busy wait), which could leave a
  payment that went through recorded as pending. On PostgreSQL row locks serialise.
- **Locks.** `lock_study` and `lock_posting` take the row (PostgreSQL `FOR NO KEY UPDATE`,
  which leaves the inserts that reference the row alone); on SQLite the writer's lock on
  the database already serialises.
- **Claims.** A platform call that makes something (a Prolific study, an MTurk HIT) sits
  between two commits, so the lock cannot be held across it: a run commits a claim first.
  The posting's claim (`preparing_since` in its settings) makes a second run answer 409
  "publishing in progress" instead of creating a second Prolific study; a unit's claim is
  its `sending` status with the time it was taken (`CrowdHit.published_at` while
  `sending`; the time it was published once `published`). A claim older than
  `STALE_CLAIM` belongs to a run that died: the next run takes it over and looks on the
  platform for what the dead run may have made before making it again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.crowd.common import CrowdServiceError, SessionFactory
from app.db import begin_write, unit_of_work
from app.models import CrowdHit, CrowdPosting, Study

# Longer than any one platform call with its retries (MTurk: 5 attempts of at most 30 s;
# Prolific: 4 retries with backoff), so a live run's claim is never taken over.
STALE_CLAIM = timedelta(minutes=10)
PREPARING = "preparing_since"


@contextmanager
def writing(make_session: SessionFactory) -> Iterator[Session]:
    """`unit_of_work`, started as a writer (SQLite `BEGIN IMMEDIATE`; see the module)."""
    with unit_of_work(make_session) as session:
        begin_write(session)
        yield session


def _postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def lock_study(session: Session, study_id: int) -> None:
    """Serialise the runs that may create the study's posting (a unique row)."""
    if _postgres(session):
        session.execute(
            select(Study.id).where(Study.id == study_id).with_for_update(key_share=True)
        )


def lock_posting(session: Session, posting_id: int) -> CrowdPosting:
    """The posting, locked for this unit of work (404 when it is gone)."""
    query = select(CrowdPosting).where(CrowdPosting.id == posting_id)
    if _postgres(session):
        query = query.with_for_update(key_share=True)
    posting = session.scalars(query.execution_options(populate_existing=True)).first()
    if posting is None:
        raise CrowdServiceError("no such posting", 404)
    return posting


def _when(text: object) -> datetime | None:
    try:
        when = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def check_not_preparing(posting: CrowdPosting, now: datetime) -> None:
    """409 while another run prepares the posting (its claim is not stale)."""
    since = _when(posting.settings.get(PREPARING)) if posting.external_id is None else None
    if since is not None and now - since < STALE_CLAIM:
        wait = max(1, round((since + STALE_CLAIM - now).total_seconds() / 60))
        raise CrowdServiceError(
            f"publishing in progress: another run is creating this study on "
            f"{posting.provider} since {since:%H:%M:%S} UTC. Wait for it to finish; if it "
            f"stopped (a crash), publish again in {wait} minutes",
            409,
        )


def claim_preparing(posting: CrowdPosting, now: datetime) -> bool:
    """Claim the preparing of `posting` (commit it before the platform call); whether an
    earlier attempt may have made something already (a claim taken over, a failure)."""
    check_not_preparing(posting, now)
    interrupted = PREPARING in posting.settings or posting.status in ("preparing", "failed")
    posting.status = "preparing"
    posting.settings = {**posting.settings, PREPARING: now.isoformat()}
    return interrupted


def release_preparing(posting: CrowdPosting) -> None:
    if PREPARING in posting.settings:
        posting.settings = {k: v for k, v in posting.settings.items() if k != PREPARING}


def claimable_unit(now: datetime):
    """The SQL condition for a unit row a run may claim: pending, failed, or `sending`
    under a stale claim (or one taken before claims were timed)."""
    stale = (CrowdHit.published_at.is_(None)) | (CrowdHit.published_at < now - STALE_CLAIM)
    return CrowdHit.status.in_(("pending", "failed")) | ((CrowdHit.status == "sending") & stale)
