"""Import an MTurk-format results file (`Batch_results.csv` of MTurk's requester site, Turkle
or another MTurk-compatible tool) of a study's batch (app.crowd.batch; docs/design.md §2).

Every row is stored through the annotator pages' own submission code: the row's worker is
found or made (`identities.crowd_annotator`, which locks them), a lease is taken on exactly
the row's HIT (`leases.lease_hit`: the claim's lock order, slot counters, cap and "never
the same HIT twice"), and the answers are submitted (the next-word `submit`: d from the HIT's
stored screen order, the time checks, a repeat stores nothing twice). The same path as
`recovery.store_recovered_submission` of an MTurk sync, with a lease that names its HIT.

Decisions:

- Channel. A row's worker is an annotator of the `batch` channel, known by the file's
  `WorkerId` within the source the researcher names (`source:WorkerId`), not of
  `mturk`: the rows never pass through our MTurk API calls (sync, approve, bonus, the cap
  qualification select `mturk` workers and would send a Turkle user's id or another
  tool's assignment id to MTurk). The same person working through
  the live MTurk page is another annotator. A WorkerId must be a platform id (letters,
  digits, `-`, `_`, at most 64; MTurk's and Turkle's are); other rows are reported.
- Sources. Turkle's WorkerId is its numeric user id and its AssignmentId counts from 1 in
  each installation, so ids mean nothing across tools: every import names its source (a
  short name the researcher gives: `lab-turkle`, `mturk-site`), and worker ids and
  assignment keys are taken within it. Two installations feeding one study are two
  sources; the same installation must keep its name from one import to the next.
- Anonymous rows. A row without a WorkerId (Turkle without "Login required") is refused
  with a message that names the setting: work that names no person cannot be capped,
  blocked or kept to one answer per HIT.
- Confirmed. DESIGN counts MTurk work once confirmed through the MTurk API. A batch row is
  confirmed by the researcher importing it: the file is theirs, and each row was checked
  against the batch as exported (ids, every echoed `Input.*` cell, the answers). So the
  assignments are stored with `unverified` false: they count at once, and nothing is
  left waiting for a confirmation that could never come. Payment is the tool's business.
- Idempotence. A row is keyed by its source and `AssignmentId`, stored as
  `external_assignment_id` in the form `batch/<study id>/<source>/<AssignmentId>`: that
  column is unique over every study and channel, and Turkle numbers assignments 1, 2,
  3... in each of its installations. A
  row whose key is stored already is submitted again, which stores nothing (`repeated`;
  answers that differ are reported, and the stored ones kept); a key held by another
  worker or HIT is reported and skipped.
- Incomplete rows. A row must answer every text of its HIT, as a post of the service's
  own page must (`submit` refuses "Please choose an answer for every text"): a HIT's
  texts are balanced together (the attention item, the kinds), so part of one is not
  stored. The row is refused whole, naming the texts without an answer.
- Transactions. One per file, the caller's; each row in its own savepoint, so a refused
  row is rolled back alone and the good rows are kept, while a crash mid-file stores
  nothing and a re-run stores each row once. Rows are stored in HIT id order, the order
  in which every HIT lock is taken. On SQLite start the transaction as a writer
  (`app.db.begin_write`), as the CLI does.
- Consent and comments. Where the study has a consent text, the template shows it on every
  HIT with a required box (`consent`), and a row without it ticked is refused
  (`batch.NO_CONSENT`); the worker's `consented_at` is the row's SubmitTime (when the
  ticked box was sent; else its AcceptTime; else the import's time), the earliest of
  their rows kept (`give_consent`). The row's comment (`comment`, when the study takes
  comments) is the assignment's, read by `comment_from` as the web page reads one (a
  comment the page would refuse refuses the row) and stored by `store_extras`; exports
  neutralise it as every CSV cell.
- Times. A row's `Answer.ms<p>` are the client times; without them, the tool's
  `WorkTimeInSeconds` spread over the texts stands in for the server's own measure (the
  lease records the work as begun that long before the import).
"""

from __future__ import annotations

import csv
import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.annotation.errors import AnnotationError
from app.annotation.identities import PLATFORM_ID, crowd_annotator
from app.annotation.leases import lease_hit
from app.annotation.participants import Extras, consent_text, give_consent, store_extras
from app.audit.service import Actor, record_by
from app.crowd.batch import BatchError, ResultRow, RowError, parse_results
from app.models import Assignment, Channel, Study, StudyStatus, utcnow
from app.studytypes.registry import study_type_of

_KEY_LENGTH = 255  # Assignment.external_assignment_id
SOURCE = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
SOURCE_RULE = "lower-case letters, digits and -, at most 32, e.g. lab-turkle"
# A tool's time: "Sat Nov 28 12:30:00 UTC 2026" (Turkle, in its server's zone) or "... PST
# 2026" (MTurk's requester site, in Pacific time). Other zones are not guessed at.
_TOOL_TIME = re.compile(
    r"[A-Z][a-z]{2} ([A-Z][a-z]{2} [0-9]{1,2} [0-9:]{8}) ([A-Z]{1,5}) ([0-9]{4})"
)
_ZONES = {"UTC": 0, "GMT": 0, "Z": 0, "PST": -8, "PDT": -7}


@dataclass
class ImportReport:
    """What an import did, row by row of the file (its header is line 1)."""

    stored: int = 0  # rows stored now
    repeated: int = 0  # rows stored by an earlier import: nothing written
    too_fast: int = 0  # judgments stored now that are faster than the study's minimum
    errors: list[RowError] = field(default_factory=list)  # rows skipped, and why
    # Repeats whose answers differ from the stored ones (the stored ones were kept).
    differing: list[RowError] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return len(self.errors)


def check_source(source: str) -> str:
    """The name of the tool installation a results file comes from, if it is one."""
    if not SOURCE.fullmatch(source):
        raise BatchError(f"The source {source[:40]!r} is not a source name ({SOURCE_RULE}).")
    return source


def tool_time(value: str | None) -> datetime | None:
    """A time as an MTurk-format results file writes it (`_TOOL_TIME`), or in ISO 8601 with
    its offset; None: none, or not one of these."""
    value = (value or "").strip()
    if found := _TOOL_TIME.fullmatch(value):
        clock, zone, year = found.groups()
        if zone not in _ZONES:
            return None
        try:
            naive = datetime.strptime(f"{clock} {year}", "%b %d %H:%M:%S %Y")
            return naive.replace(tzinfo=timezone(timedelta(hours=_ZONES[zone]))).astimezone(UTC)
        except (ValueError, OverflowError):  # OverflowError: beyond year 9999 (or 1) in UTC
            return None
    try:
        parsed = datetime.fromisoformat(value) if value else None
        return parsed.astimezone(UTC) if parsed is not None and parsed.tzinfo else None
    except (ValueError, OverflowError):
        return None


def consent_time(row: ResultRow, now: datetime) -> datetime:
    """When a row's consent was given: its SubmitTime (the ticked box sent), else its
    AcceptTime, else `now`; never later than `now`."""
    at = tool_time(row.submit_time) or tool_time(row.accept_time) or now
    return min(at, now)


def assignment_key(study: Study, source: str, assignment_id: str) -> str:
    """The `external_assignment_id` of a batch row: its AssignmentId, within the study and
    the source."""
    return f"batch/{study.id}/{source}/{assignment_id}"


def import_results(
    session: Session, study: Study, text: str, *, source: str, by: Actor | None
) -> ImportReport:
    """Store the rows of a results file of `study`'s batch from `source`; report the ones
    skipped.

    `BatchError` (nothing stored) for a closed study, a bad source name or a file that is
    not a results file of this batch; a bad row is reported in `errors` and the others
    are stored. Idempotent.
    """
    check_source(source)
    if study.status is StudyStatus.closed:
        raise BatchError(f"Study {study.slug} is closed: reopen it to import results.")
    try:
        parsed = parse_results(session, study, text)
    except csv.Error as exc:
        raise BatchError(f"This results file cannot be read as CSV: {exc}.") from None
    report = ImportReport(errors=list(parsed.errors))
    now = utcnow()
    for row in sorted(parsed.rows, key=lambda r: (r.hit_id, r.line)):
        try:
            with session.begin_nested():  # a refused row rolls back alone
                result = _store(session, study, source, row, now)
        except AnnotationError as exc:
            report.errors.append(RowError(row.line, str(row.hit_index), exc.message))
            continue
        if not result.repeated:
            report.stored += 1
            report.too_fast += result.too_fast
            continue
        report.repeated += 1
        if result.kept:
            report.differing.append(
                RowError(
                    row.line,
                    str(row.hit_index),
                    f"assignment {row.assignment_id} was imported before with other answers; "
                    "the ones imported first were kept",
                )
            )
    report.errors.sort(key=lambda e: e.line)
    record_by(
        session,
        by,
        "crowd_results_imported",
        study=study,
        source=source,
        sha256=hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest(),
        rows=len(parsed.rows) + len(parsed.errors),
        stored=report.stored,
        repeated=report.repeated,
        skipped=report.skipped,
        skipped_lines=[e.line for e in report.errors[:200]],
    )
    return report


def _store(session: Session, study: Study, source: str, row: ResultRow, now: datetime) -> Any:
    """One row, through the submission service (AnnotationError: refused, roll it back)."""
    plugin = study_type_of(study)
    store = plugin.offline_batch  # the type's submission service
    if store is None:
        raise AnnotationError(plugin.refusal(study, "batch"))
    if not PLATFORM_ID.fullmatch(row.worker_id):
        raise AnnotationError(
            f"WorkerId {row.worker_id[:40]!r} is not a worker id this service takes "
            "(letters, digits, - and _, at most 64)"
        )
    key = assignment_key(study, source, row.assignment_id)
    if len(key) > _KEY_LENGTH:
        raise AnnotationError(f"AssignmentId {row.assignment_id[:40]!r}... is too long")
    annotator = crowd_annotator(session, study, Channel.batch, row.worker_id, now, namespace=source)
    if consent_text(study) and row.consented:  # a row without it was refused when read
        give_consent(session, annotator, {"agree": "yes"}, at=consent_time(row, now))
    # Looked up under the worker's lock: a concurrent import of the same row waits above.
    found = session.execute(
        select(Assignment.public_id, Assignment.hit_id, Assignment.annotator_id).where(
            Assignment.external_assignment_id == key
        )
    ).first()
    if found is None:
        served = None
        if row.work_seconds is not None:
            served = now - timedelta(seconds=row.work_seconds)
        lease = lease_hit(
            session,
            annotator,
            row.hit_id,
            now=now,
            served_at=served,
            external_assignment_id=key,
        )
        public_id = lease.public_id
    elif (found.hit_id, found.annotator_id) != (row.hit_id, annotator.id):
        raise AnnotationError(
            f"assignment {row.assignment_id} was imported before for another worker or HIT",
            409,
        )
    else:
        public_id = found.public_id
    result = store(session, annotator, public_id, row.answers, row.times, now=now)
    if not result.repeated:  # a repeat keeps what the first import stored
        extras = Extras(comment=row.comment)
        store_extras(session, study, result.assignment, extras, last_step=True)
    return result
