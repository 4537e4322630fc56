"""Mechanical Turk through boto3: the `mturk` crowd provider (DESIGN.md §2, issue 13).

A study is one HIT type (`CreateHITType`) and one MTurk HIT per HIT of ours
(`CreateHITWithHITType`, an ExternalQuestion pointing at `/mturk/{study}`), each with a
deterministic `UniqueRequestToken`. The client (`client`: endpoints, retries, errors), the
XML and money formats (`formats`) and the fees (`fees`) are modules of their own. Every
failure is a `CrowdError`; "this exact call was already made" is `AlreadyDone`.

MTurk closed to new requesters on 30 July 2026 and closes on 30 September 2026: this
serves the sandbox, MTurk-compatible endpoints and reproductions (docs/crowd.md,
"Mechanical Turk").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from app.crowd.base import AlreadyDone, CrowdError, PlatformSubmission
from app.crowd.platforms.mturk.client import ENDPOINTS, THROTTLE_CODES, crowd_error, make_client
from app.crowd.platforms.mturk.fees import price
from app.crowd.platforms.mturk.formats import (
    REWARD_PATTERN,
    cents_of,
    external_question,
    parse_answers,
    qualification_requirements,
    reward_string,
)

if TYPE_CHECKING:
    from app.crowd.base import CostEstimate, PostingSpec, UnitToPublish

log = logging.getLogger(__name__)

# What sync asks for: every status we act on, named (the default omits some).
REVIEWABLE_STATUSES = ("Submitted", "Approved", "Rejected")
# An UpdateExpirationForHIT to a time in the past expires the HIT at once.
PAST = datetime(2015, 1, 1, tzinfo=UTC)

MAX_TOKEN = 64
# An MTurk HIT id: 30 upper-case letters and digits (HitAlreadyExists names it).
_HIT_ID = re.compile(r"\b([A-Z0-9]{30})\b")


class MTurkProvider:
    """The `CrowdProvider` for Mechanical Turk (also `CapQualifying`, `UnitLookup`,
    `PaidBonuses` and `Reopening`)."""

    name = "mturk"
    bonuses_listed_at_once = True  # SendBonus pays before it answers

    def __init__(
        self,
        environment: str = "sandbox",
        *,
        client=None,
        endpoint_url: str | None = None,
        max_attempts: int = 5,
        retry_mode: str = "standard",
        frame_height: int = 800,
    ) -> None:
        if environment not in ENDPOINTS:
            raise CrowdError(f"unknown MTurk environment {environment!r}: sandbox or production")
        self.environment = environment
        self.frame_height = frame_height
        self.client = client or make_client(
            environment,
            endpoint_url=endpoint_url,
            max_attempts=max_attempts,
            retry_mode=retry_mode,
        )

    # -- plumbing ---------------------------------------------------------------------

    def _call(self, operation: str, **params: Any) -> dict[str, Any]:
        from botocore import xform_name
        from botocore.exceptions import BotoCoreError, ClientError

        method = getattr(self.client, xform_name(operation))
        try:
            return method(**params)
        except (ClientError, BotoCoreError) as exc:
            raise crowd_error(exc, operation) from exc

    # -- money: estimate and balance --------------------------------------------------

    def estimate_cost(
        self,
        spec: PostingSpec,
        assignments: int,
        *,
        bonus_cents: int = 0,
        max_assignments: int | None = None,
    ) -> CostEstimate:
        """MTurk's charge for `assignments` assignments: `price` (no call to MTurk)."""
        return price(spec, assignments, bonus_cents=bonus_cents, max_assignments=max_assignments)

    def balance_cents(self) -> int | None:
        """`GetAccountBalance`: the available balance (the sandbox shows a fixed $10,000)."""
        response = self._call("GetAccountBalance")
        return cents_of(response.get("AvailableBalance", "0"))

    # -- publishing -------------------------------------------------------------------

    def cap_qualification(self, spec: PostingSpec) -> str:
        """`CreateQualificationType`: the study's "reached the cap" qualification, once.

        Its name is fixed by the study's slug and the posting's key (`spec.key`: the
        study's id and creation time, the environment), so that another database's study
        of the same slug, or the study made anew, has its own; MTurk refuses a second type
        of the same name, so a repeated call finds the first (`ListQualificationTypes`).
        """
        name = f"ebc-judge cap reached: {spec.study_slug}" + (f" {spec.key}" if spec.key else "")
        try:
            response = self._call(
                "CreateQualificationType",
                Name=name,
                Description=(
                    f"Workers who did the most HITs of study {spec.study_slug} allowed "
                    "to one person."
                )[:2000],
                QualificationTypeStatus="Active",
                Keywords="ebc-judge",
            )
            return response["QualificationType"]["QualificationTypeId"]
        except CrowdError as exc:
            found = self._qualification_named(name)
            if found is None:
                raise
            log.info("cap qualification %s already exists (%s)", found, exc)
            return found

    def exclusion_qualification(self, spec: PostingSpec) -> str:
        """`CreateQualificationType` (found by name when it exists): the posting's "took
        part in an earlier study" qualification; then `AssociateQualificationWithWorker`,
        silently, for each worker of the earlier studies (`spec.exclude_workers`; a repeated
        grant changes nothing). The HIT type requires that it does not exist."""
        name = f"ebc-judge took part before: {spec.study_slug}" + (
            f" {spec.key}" if spec.key else ""
        )
        try:
            response = self._call(
                "CreateQualificationType",
                Name=name,
                Description=(
                    f"Workers of the studies that study {spec.study_slug} excludes (they "
                    "took part before)."
                )[:2000],
                QualificationTypeStatus="Active",
                Keywords="ebc-judge",
            )
            qualification = response["QualificationType"]["QualificationTypeId"]
        except CrowdError:
            found = self._qualification_named(name)
            if found is None:
                raise
            qualification = found
        for worker in spec.exclude_workers:
            self._call(
                "AssociateQualificationWithWorker",
                QualificationTypeId=qualification,
                WorkerId=worker,
                IntegerValue=1,
                SendNotification=False,
            )
        return qualification

    def _qualification_named(self, name: str) -> str | None:
        token = None
        while True:
            params: dict[str, Any] = {
                "Query": name,
                "MustBeRequestable": False,
                "MustBeOwnedByCaller": True,
                "MaxResults": 100,
            }
            if token:
                params["NextToken"] = token
            page = self._call("ListQualificationTypes", **params)
            for qt in page.get("QualificationTypes", []):
                if qt.get("Name") == name:
                    return qt["QualificationTypeId"]
            token = page.get("NextToken")
            if not token:
                return None

    def grant_cap(self, qualification_id: str, external_worker_id: str) -> None:
        """`AssociateQualificationWithWorker` with `SendNotification=False`: the worker
        stops seeing the study's HITs without an e-mail about it."""
        self._call(
            "AssociateQualificationWithWorker",
            QualificationTypeId=qualification_id,
            WorkerId=external_worker_id,
            IntegerValue=1,
            SendNotification=False,
        )

    def prepare(self, spec: PostingSpec) -> str:
        """`CreateHITType`: the study's HIT type (title, description, reward as a decimal
        string, durations, keywords, qualification requirements); its HITTypeId.

        MTurk returns the existing type for identical properties, so repeating it is safe.
        """
        if not 1 <= len(spec.title) <= 128:
            raise CrowdError("an MTurk title has 1 to 128 characters")
        if not 1 <= len(spec.description) <= 2000:
            raise CrowdError("an MTurk description has 1 to 2000 characters")
        if not 30 <= spec.assignment_seconds <= 31_536_000:
            raise CrowdError("an MTurk assignment lasts 30 seconds to 365 days")
        if not 0 <= spec.auto_approve_seconds <= 2_592_000:
            raise CrowdError("MTurk approves automatically after 0 to 30 days")
        reward = reward_string(spec.reward_cents)
        assert REWARD_PATTERN.fullmatch(reward)
        params: dict[str, Any] = {
            "Title": spec.title,
            "Description": spec.description,
            "Reward": reward,
            "AssignmentDurationInSeconds": spec.assignment_seconds,
            "AutoApprovalDelayInSeconds": spec.auto_approve_seconds,
            "QualificationRequirements": qualification_requirements(
                spec.qualifications, self.environment
            ),
        }
        if spec.keywords:
            params["Keywords"] = ", ".join(spec.keywords)[:1000]
        return self._call("CreateHITType", **params)["HITTypeId"]

    def publish(self, external_id: str, spec: PostingSpec, unit: UnitToPublish) -> str:
        """`CreateHITWithHITType`: one MTurk HIT for one of ours; its HITId.

        The HIT carries the ExternalQuestion (`spec.entry_url`), `MaxAssignments` = our
        HIT's replicas (a warning at 10 or more: MTurk's fee doubles), our HIT's opaque id
        as `RequesterAnnotation`, and `unit.request_token` as `UniqueRequestToken`. MTurk
        answers a repeated token with `HitAlreadyExists` (naming the HIT): that is the
        HIT we asked for, found and returned as a success.
        """
        token = unit.request_token
        if not token or len(token) > MAX_TOKEN:
            raise CrowdError(f"a UniqueRequestToken has 1 to {MAX_TOKEN} characters: {token!r}")
        if unit.max_assignments < 1:
            raise CrowdError("an MTurk HIT needs at least one assignment")
        if unit.max_assignments >= 10:
            log.warning(
                "HIT %s has %d assignments: MTurk charges 40%% instead of 20%% from 10 on",
                unit.hit_public_id,
                unit.max_assignments,
            )
        if not 30 <= spec.lifetime_seconds <= 31_536_000:
            raise CrowdError("an MTurk HIT stays listed 30 seconds to 365 days")
        try:
            response = self._call(
                "CreateHITWithHITType",
                HITTypeId=external_id,
                MaxAssignments=unit.max_assignments,
                LifetimeInSeconds=spec.lifetime_seconds,
                Question=external_question(spec.entry_url, self.frame_height),
                RequesterAnnotation=unit.hit_public_id[:255],
                UniqueRequestToken=token,
            )
        except CrowdError as exc:
            if not _hit_already_exists(exc):
                raise
            named = _HIT_ID.search(str(exc))
            hit_id = named.group(1) if named else self.find_published(external_id, unit)
            if hit_id is None:
                raise CrowdError(
                    f"MTurk says the HIT for token {token} exists but it was not found",
                    code=exc.code,
                ) from exc
            log.info("HIT %s already made for token %s", hit_id, token)
            return hit_id
        return response["HIT"]["HITId"]

    def find_published(self, external_id: str, unit: UnitToPublish) -> str | None:
        """The MTurk HIT of HIT type `external_id` whose RequesterAnnotation is our HIT's
        id (`ListHITs`, every page); the oldest if there are several, None if none."""
        found: list[tuple[datetime, str]] = []
        token = None
        while True:
            params: dict[str, Any] = {"MaxResults": 100}
            if token:
                params["NextToken"] = token
            page = self._call("ListHITs", **params)
            for hit in page.get("HITs", []):
                if (
                    hit.get("HITTypeId") == external_id
                    and hit.get("RequesterAnnotation") == unit.hit_public_id
                ):
                    created = hit.get("CreationTime") or datetime.max.replace(tzinfo=UTC)
                    found.append((created, hit["HITId"]))
            token = page.get("NextToken")
            if not token:
                break
        if len(found) > 1:
            log.warning("%d MTurk HITs carry %s", len(found), unit.hit_public_id)
        return min(found)[1] if found else None

    # -- submissions ------------------------------------------------------------------

    def submissions(
        self, external_id: str, unit_external_ids: Sequence[str]
    ) -> Iterator[PlatformSubmission]:
        """`ListAssignmentsForHIT` for every HIT, every page (`NextToken`), with the
        statuses named (Submitted, Approved, Rejected); answers parsed from the XML."""
        for hit_id in unit_external_ids:
            token = None
            while True:
                params: dict[str, Any] = {
                    "HITId": hit_id,
                    "MaxResults": 100,
                    "AssignmentStatuses": list(REVIEWABLE_STATUSES),
                }
                if token:
                    params["NextToken"] = token
                page = self._call("ListAssignmentsForHIT", **params)
                for a in page.get("Assignments", []):
                    yield PlatformSubmission(
                        external_assignment_id=a["AssignmentId"],
                        external_worker_id=a["WorkerId"],
                        external_hit_id=a.get("HITId") or hit_id,
                        status=a.get("AssignmentStatus", ""),
                        submitted_at=a.get("SubmitTime"),
                        answers=parse_answers(a.get("Answer")),
                    )
                token = page.get("NextToken")
                if not token:
                    break

    # -- money and standing -----------------------------------------------------------

    def approve(self, external_assignment_id: str, *, feedback: str | None = None) -> None:
        """`ApproveAssignment`: pays the reward and MTurk's fee.

        An assignment MTurk already shows as approved raises `AlreadyDone` (checked with
        `GetAssignment` when the approval is refused), so a repeated approval is a success.
        """
        params: dict[str, Any] = {"AssignmentId": external_assignment_id}
        if feedback:
            params["RequesterFeedback"] = feedback[:1024]
        try:
            self._call("ApproveAssignment", **params)
        except CrowdError as exc:
            if self._status_of(external_assignment_id) == "Approved":
                raise AlreadyDone(str(exc), code=exc.code) from exc
            raise

    def reject(self, external_assignment_id: str, *, feedback: str) -> None:
        """`RejectAssignment` with the feedback MTurk requires (the worker reads it); no
        payment. One MTurk already shows as rejected raises `AlreadyDone`."""
        if not feedback or not feedback.strip():
            raise CrowdError("a rejection needs feedback for the worker")
        try:
            self._call(
                "RejectAssignment",
                AssignmentId=external_assignment_id,
                RequesterFeedback=feedback.strip()[:1024],
            )
        except CrowdError as exc:
            if self._status_of(external_assignment_id) == "Rejected":
                raise AlreadyDone(str(exc), code=exc.code) from exc
            raise

    def submission_bonuses_cents(self, submission_id: str) -> list[int]:
        """`ListBonusPayments(AssignmentId=...)`, every page: the bonuses paid on the
        assignment, in cents (`PaidBonuses`: checked before a bonus is made again)."""
        paid: list[int] = []
        token = None
        while True:
            params: dict[str, Any] = {"AssignmentId": submission_id, "MaxResults": 100}
            if token:
                params["NextToken"] = token
            page = self._call("ListBonusPayments", **params)
            paid += [cents_of(b.get("BonusAmount", "")) for b in page.get("BonusPayments", [])]
            token = page.get("NextToken")
            if not token:
                return paid

    def _status_of(self, external_assignment_id: str) -> str | None:
        try:
            got = self._call("GetAssignment", AssignmentId=external_assignment_id)
        except CrowdError:
            return None
        return got.get("Assignment", {}).get("AssignmentStatus")

    def bonus(self, worker: str, work: str, cents: int, *, reason: str, request_token: str) -> None:
        """`SendBonus` (amount as a decimal string, the reason the worker reads) with its
        own `UniqueRequestToken`: MTurk refuses a repeated token, which is `AlreadyDone`
        (the bonus was paid once). MTurk remembers a token for 24 hours only: the ledger
        lists the assignment's bonuses (`submission_bonuses_cents`) before a retry."""
        if not reason or not reason.strip():
            raise CrowdError("a bonus needs a reason for the worker")
        if not request_token or len(request_token) > MAX_TOKEN:
            raise CrowdError(f"a UniqueRequestToken has 1 to {MAX_TOKEN} characters")
        try:
            self._call(
                "SendBonus",
                WorkerId=worker,
                AssignmentId=work,
                BonusAmount=reward_string(cents),
                Reason=reason.strip()[:1024],
                UniqueRequestToken=request_token,
            )
        except CrowdError as exc:
            if _token_already_used(exc, request_token):
                raise AlreadyDone(str(exc), code=exc.code) from exc
            raise

    def block(self, external_worker_id: str, *, reason: str) -> None:
        """`CreateWorkerBlock`: the worker can no longer accept any of this account's HITs."""
        if not reason or not reason.strip():
            raise CrowdError("MTurk needs a reason to block a worker")
        self._call("CreateWorkerBlock", WorkerId=external_worker_id, Reason=reason.strip()[:1024])

    def unblock(self, external_worker_id: str, *, reason: str) -> None:
        """`DeleteWorkerBlock`: lift a block made by `block`."""
        params: dict[str, Any] = {"WorkerId": external_worker_id}
        if reason and reason.strip():
            params["Reason"] = reason.strip()[:1024]
        self._call("DeleteWorkerBlock", **params)

    def expire(self, external_id: str, unit_external_ids: Sequence[str]) -> None:
        """`UpdateExpirationForHIT` to a past time for every HIT: no new worker can accept
        them; work already accepted can still be submitted."""
        for hit_id in unit_external_ids:
            self._call("UpdateExpirationForHIT", HITId=hit_id, ExpireAt=PAST)

    def reopen(
        self, external_id: str, unit_external_ids: Sequence[str], lifetime_seconds: int
    ) -> None:
        """`UpdateExpirationForHIT` to `lifetime_seconds` from now for every HIT: HITs
        that `expire` took down (an expiry in the past) are listed again; the API
        reference allows extending an expiration, never shortening it, and only expired
        HITs are passed here. A later expiry than the first does no harm, so a retried
        call that reached MTurk before is safe."""
        if not 30 <= lifetime_seconds <= 31_536_000:
            raise CrowdError("an MTurk HIT stays listed 30 seconds to 365 days")
        until = datetime.now(UTC) + timedelta(seconds=lifetime_seconds)
        for hit_id in unit_external_ids:
            self._call("UpdateExpirationForHIT", HITId=hit_id, ExpireAt=until)


def _hit_already_exists(exc: CrowdError) -> bool:
    return "HitAlreadyExists" in (exc.code or "") or "HitAlreadyExists" in str(exc)


def _token_already_used(exc: CrowdError, token: str) -> bool:
    """MTurk's answer to a repeated UniqueRequestToken. The API reference (SendBonus)
    says only that "subsequent calls will return an error with a message containing the
    request ID"; its error code is not documented. So: MTurk's refusal (not a fault or a
    lost answer, `maybe_done`) whose message names this token, which no other refusal
    does (our tokens are 40 hex digits of a hash, `common.request_token`)."""
    return not exc.maybe_done and exc.code not in THROTTLE_CODES and token in str(exc)
