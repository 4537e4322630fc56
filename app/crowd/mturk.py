"""Mechanical Turk through boto3: the `mturk` crowd provider (DESIGN.md §2, issue 13).

One `boto3.client("mturk", region_name="us-east-1", endpoint_url=...)` per provider: the
sandbox requester endpoint by default, production only when the caller says so, or any
endpoint that speaks the MTurk requester API (a stand-in in the tests). Never
`region_name="sandbox"`: it signs with the wrong scope. Credentials come from the usual
AWS chain (environment, shared files, instance role), never from our settings.

A study is one HIT type (`CreateHITType`) and one MTurk HIT per HIT of ours
(`CreateHITWithHITType`, an ExternalQuestion pointing at `/mturk/{study}`), each with a
deterministic `UniqueRequestToken`. Throttling is retried by botocore (standard or
adaptive mode; `RateExceeded`, which botocore does not know, by a handler of our own).
Every failure is a `CrowdError`; "this exact call was already made" is `AlreadyDone`.

MTurk closed to new requesters on 30 July 2026 and closes on 30 September 2026: this
serves the sandbox, MTurk-compatible endpoints and reproductions (docs/crowd.md,
"Mechanical Turk").
"""

from __future__ import annotations

import logging
import random
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

from app.crowd.base import (
    AlreadyDone,
    CostEstimate,
    CrowdError,
    PlatformSubmission,
    PostingSpec,
    Qualifications,
    UnitToPublish,
)

log = logging.getLogger(__name__)

REGION = "us-east-1"
SANDBOX_ENDPOINT = "https://mturk-requester-sandbox.us-east-1.amazonaws.com"
PRODUCTION_ENDPOINT = "https://mturk-requester.us-east-1.amazonaws.com"
ENDPOINTS = {"sandbox": SANDBOX_ENDPOINT, "production": PRODUCTION_ENDPOINT}

EXTERNAL_QUESTION_NS = (
    "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/"
    "ExternalQuestion.xsd"
)
# System qualification types (the same ids in the sandbox and in production).
QUAL_APPROVAL_RATE = "000000000000000000L0"  # PercentAssignmentsApproved
QUAL_NUMBER_APPROVED = "00000000000000000040"  # NumberHITsApproved
QUAL_LOCALE = "00000000000000000071"  # Worker_Locale
# Masters differs between the two environments.
QUAL_MASTERS = {
    "sandbox": "2ARFPLSP75KLA8M8DH1HTEQVJT3SY6",
    "production": "2F1QJWKUDD8XADTFD2Q0G6UTO95ALH",
}
# What sync asks for: every status we act on, named (the default omits some).
REVIEWABLE_STATUSES = ("Submitted", "Approved", "Rejected")
# MTurk appends these to the ExternalURL itself; a URL that carries one is refused.
RESERVED_PARAMS = ("assignmentId", "hitId", "turkSubmitTo", "workerId")
# An UpdateExpirationForHIT to a time in the past expires the HIT at once.
PAST = datetime(2015, 1, 1, tzinfo=UTC)

MAX_TOKEN = 64
REWARD_PATTERN = re.compile(r"^\d+\.\d{2}$")
THROTTLE_CODES = frozenset({"RateExceeded", "ThrottlingException", "Throttling"})
# An MTurk HIT id: 30 upper-case letters and digits (HitAlreadyExists names it).
_HIT_ID = re.compile(r"\b([A-Z0-9]{30})\b")
_MAX_ANSWER_XML = 1_000_000

# Fees (percent of rewards and bonuses), as MTurk's pricing page states them.
FEE_PERCENT = 20
FEE_PERCENT_TEN_OR_MORE = 40  # MaxAssignments >= 10
MASTERS_EXTRA_PERCENT = 5
MIN_FEE_CENTS = 1  # per assignment and per bonus


def price(
    spec: PostingSpec,
    assignments: int,
    *,
    bonus_cents: int = 0,
    max_assignments: int | None = None,
) -> CostEstimate:
    """What MTurk charges for `assignments` assignments at the spec's reward: its fee
    rules alone, so an estimate needs no client, credentials or network.

    Fee per assignment: 20% of the reward, 40% when the HIT has 10 or more
    assignments (`max_assignments`), plus 5% for Masters; bonuses carry 20%. Each fee
    is rounded to the cent (half up) with a minimum of 1 cent per assignment, and
    `bonus_cents` is priced as one payment (the 1-cent minimum applies per payment,
    so many small bonuses cost slightly more). The sandbox charges nothing; these are
    production's prices for the same HITs.
    """
    if assignments < 0 or bonus_cents < 0:
        raise CrowdError("assignments and bonuses cannot be negative")
    notes: list[str] = []
    percent = FEE_PERCENT
    if max_assignments is not None and max_assignments >= 10:
        percent = FEE_PERCENT_TEN_OR_MORE
        notes.append("10 or more assignments per HIT: MTurk's fee is 40%, not 20%")
    if spec.qualifications.masters:
        percent += MASTERS_EXTRA_PERCENT
        notes.append("Masters workers: MTurk adds 5%")
    reward = spec.reward_cents
    fee = max(MIN_FEE_CENTS, _percent_of(reward, percent)) if reward > 0 else 0
    bonus_fee = max(MIN_FEE_CENTS, _percent_of(bonus_cents, FEE_PERCENT)) if bonus_cents else 0
    return CostEstimate(
        rewards_cents=reward * assignments,
        fees_cents=fee * assignments + bonus_fee,
        bonuses_cents=bonus_cents,
        notes=tuple(notes),
    )


def reward_string(cents: int) -> str:
    """Integer cents -> MTurk's decimal string ("0.50"); refuses what MTurk would."""
    if isinstance(cents, bool) or not isinstance(cents, int) or cents < 1:
        raise CrowdError(f"an MTurk amount must be at least 1 cent, not {cents!r}")
    return f"{cents // 100}.{cents % 100:02d}"


def cents_of(amount: str) -> int:
    """MTurk's decimal string ("10000.00") -> integer cents."""
    try:
        value = Decimal(amount)
    except (InvalidOperation, TypeError):
        raise CrowdError(f"MTurk sent an amount that is not a number: {amount!r}") from None
    return int((value * 100).to_integral_value())


def external_question(url: str, frame_height: int) -> str:
    """The ExternalQuestion XML (2006-07-14 schema) that frames `url` on MTurk.

    The URL must be HTTPS (MTurk frames nothing else) and must not carry the parameters
    MTurk appends itself; `&` and the other XML specials are escaped.
    """
    if not url.lower().startswith("https://"):
        raise CrowdError(
            f"MTurk frames only HTTPS pages; the study's URL is {url!r} "
            "(set EBC_BASE_URL to the public https:// address)"
        )
    query = url.partition("?")[2]
    names = {part.partition("=")[0] for part in query.split("&") if part}
    clash = sorted(names & set(RESERVED_PARAMS))
    if clash:
        raise CrowdError(f"the study's URL may not carry {clash}: MTurk appends them itself")
    if not 0 <= frame_height <= 10_000:
        raise CrowdError(f"frame height {frame_height} is not between 0 and 10000 pixels")
    return (
        f'<ExternalQuestion xmlns="{EXTERNAL_QUESTION_NS}">'
        f"<ExternalURL>{escape(url)}</ExternalURL>"
        f"<FrameHeight>{int(frame_height)}</FrameHeight>"
        "</ExternalQuestion>"
    )


def parse_answers(xml: str | None) -> dict[str, str] | None:
    """An assignment's answer XML (QuestionFormAnswers) -> {QuestionIdentifier: value}.

    For an ExternalQuestion every form field the worker's browser posted to
    `externalSubmit` (but `assignmentId`) is one `<Answer>` with a `<FreeText>`. The text
    comes from the worker's browser: untrusted, so a document type declaration (entity
    expansion) or an oversized document is refused (None), as is XML that does not parse.
    None: no answer to read.
    """
    if not xml:
        return None
    if len(xml) > _MAX_ANSWER_XML or "<!DOCTYPE" in xml.upper() or "<!ENTITY" in xml.upper():
        log.warning("MTurk answer XML refused (too large or declares a document type)")
        return None
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        log.warning("MTurk answer XML does not parse: %s", exc)
        return None
    answers: dict[str, str] = {}
    for answer in root.iter():
        if _local(answer.tag) != "Answer":
            continue
        name, values = None, []
        for child in answer:
            tag = _local(child.tag)
            if tag == "QuestionIdentifier":
                name = (child.text or "").strip()
            elif tag in ("FreeText", "SelectionIdentifier", "OtherSelectionText"):
                values.append(child.text or "")
        if name:
            answers[name] = "|".join(values)
    return answers


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def qualification_requirements(q: Qualifications, environment: str) -> list[dict[str, Any]]:
    """The study's requirements as MTurk's `QualificationRequirements`.

    Each hides the HITs from workers who do not meet it (`DiscoverPreviewAndAccept`).
    The cap qualification is required *not* to exist: a worker who reached the cap is
    granted it (`grant_cap`) and stops seeing the study's HITs.
    """
    guarded = "DiscoverPreviewAndAccept"
    out: list[dict[str, Any]] = []
    if q.min_approval_rate is not None:
        if not 0 <= q.min_approval_rate <= 100:
            raise CrowdError("the approval rate must be a percentage (0 to 100)")
        out.append(
            {
                "QualificationTypeId": QUAL_APPROVAL_RATE,
                "Comparator": "GreaterThanOrEqualTo",
                "IntegerValues": [int(q.min_approval_rate)],
                "ActionsGuarded": guarded,
            }
        )
    if q.min_approved is not None:
        if q.min_approved < 0:
            raise CrowdError("the number of approved HITs cannot be negative")
        out.append(
            {
                "QualificationTypeId": QUAL_NUMBER_APPROVED,
                "Comparator": "GreaterThanOrEqualTo",
                "IntegerValues": [int(q.min_approved)],
                "ActionsGuarded": guarded,
            }
        )
    if q.locales:
        bad = [c for c in q.locales if not re.fullmatch(r"[A-Z]{2}", c)]
        if bad:
            raise CrowdError(f"locales are ISO 3166 country codes such as US or GB, not {bad}")
        out.append(
            {
                "QualificationTypeId": QUAL_LOCALE,
                "Comparator": "In",
                "LocaleValues": [{"Country": c} for c in q.locales],
                "ActionsGuarded": guarded,
            }
        )
    if q.masters:
        out.append(
            {
                "QualificationTypeId": QUAL_MASTERS[environment],
                "Comparator": "Exists",
                "ActionsGuarded": guarded,
            }
        )
    if q.cap_qualification_id:
        out.append(
            {
                "QualificationTypeId": q.cap_qualification_id,
                "Comparator": "DoesNotExist",
                "ActionsGuarded": guarded,
            }
        )
    return out


def moves_real_money(endpoint_url: str | None) -> bool:
    """Whether an endpoint URL is MTurk production: any AWS host but the sandbox's."""
    if not endpoint_url:
        return False
    host = (urlsplit(endpoint_url.strip()).hostname or "").lower().rstrip(".")
    sandbox = urlsplit(SANDBOX_ENDPOINT).hostname
    return host != sandbox and (host == "amazonaws.com" or host.endswith(".amazonaws.com"))


def make_client(
    environment: str = "sandbox",
    *,
    endpoint_url: str | None = None,
    max_attempts: int = 5,
    retry_mode: str = "standard",
    timeout_s: float = 30,
):
    """A boto3 MTurk client for `environment`, or for `endpoint_url` when given.

    botocore retries throttling (`ThrottlingException`) and transient errors in
    `retry_mode` ("standard" or "adaptive", which also paces requests client-side);
    `RateExceeded`, an MTurk code botocore does not list, gets the same treatment from
    `_retry_rate_exceeded`.
    """
    import boto3
    from botocore.config import Config

    if environment not in ENDPOINTS:
        raise CrowdError(f"unknown MTurk environment {environment!r}: sandbox or production")
    if retry_mode not in ("standard", "adaptive"):
        raise CrowdError(f"retry mode {retry_mode!r}: standard or adaptive")
    config = Config(
        retries={"mode": retry_mode, "total_max_attempts": max_attempts},
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
    )
    # A session of its own: the default session caches the credentials it found first.
    client = boto3.session.Session().client(
        "mturk",
        region_name=REGION,
        endpoint_url=endpoint_url or ENDPOINTS[environment],
        config=config,
    )
    client.meta.events.register("needs-retry.mturk", _RateExceededRetry(max_attempts).needs_retry)
    return client


class _RateExceededRetry:
    """Retry MTurk's `RateExceeded` like botocore retries `ThrottlingException`:
    exponential backoff with full jitter, up to `max_attempts` attempts in all."""

    def __init__(self, max_attempts: int, base_s: float = 1.0, cap_s: float = 20.0) -> None:
        self.max_attempts = max_attempts
        self.base_s = base_s
        self.cap_s = cap_s

    def needs_retry(self, response=None, attempts: int = 1, **_: Any) -> float | None:
        if response is None or attempts >= self.max_attempts:
            return None
        error = (response[1] or {}).get("Error", {})
        code = error.get("Code", "")
        turk = str((response[1] or {}).get("TurkErrorCode", ""))
        if code == "RateExceeded" or turk.endswith("RateExceeded"):
            return random.random() * min(self.cap_s, self.base_s * 2 ** (attempts - 1))
        return None


def _error(exc: Exception, operation: str) -> CrowdError:
    """botocore's exception -> our CrowdError, with MTurk's own error code when it gave one.

    MTurk's refusal (a `ClientError` with a 4xx) did nothing. Anything else may have taken
    effect (`maybe_done`): a read timeout or a dropped connection after MTurk did the work,
    or a server fault (5xx), possibly after botocore's own retries; the ledger then treats
    the call's outcome as unknown (a bonus is checked with `ListBonusPayments` before it is
    made again). Only what never left this process (no credentials, bad parameters) is not.
    """
    from botocore.exceptions import ClientError, NoCredentialsError, ParamValidationError

    if isinstance(exc, NoCredentialsError):
        return CrowdError(
            "no AWS credentials: give them through the usual AWS chain "
            "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or ~/.aws/credentials)"
        )
    if isinstance(exc, ParamValidationError):
        return CrowdError(f"MTurk {operation}: {exc}")
    if isinstance(exc, ClientError):
        body = exc.response or {}
        error = body.get("Error", {})
        code = body.get("TurkErrorCode") or error.get("TurkErrorCode") or error.get("Code")
        message = error.get("Message") or str(exc)
        status = int((body.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 400)
        return CrowdError(
            f"MTurk {operation}: {message}",
            code=code,
            retryable=code in THROTTLE_CODES,
            maybe_done=status >= 500,
        )
    return CrowdError(
        f"MTurk {operation}: {exc} (the call may have reached MTurk)",
        retryable=True,
        maybe_done=True,
    )


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
            raise _error(exc, operation) from exc

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

    def bonus(
        self,
        external_worker_id: str,
        external_assignment_id: str,
        amount_cents: int,
        *,
        reason: str,
        request_token: str,
    ) -> None:
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
                WorkerId=external_worker_id,
                AssignmentId=external_assignment_id,
                BonusAmount=reward_string(amount_cents),
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


def _percent_of(cents: int, percent: int) -> int:
    """`percent`% of `cents`, rounded to the cent, halves up (integer arithmetic)."""
    return (cents * percent + 50) // 100


def _hit_already_exists(exc: CrowdError) -> bool:
    return "HitAlreadyExists" in (exc.code or "") or "HitAlreadyExists" in str(exc)


def _token_already_used(exc: CrowdError, token: str) -> bool:
    """MTurk's answer to a repeated UniqueRequestToken. The API reference (SendBonus)
    says only that "subsequent calls will return an error with a message containing the
    request ID"; its error code is not documented. So: MTurk's refusal (not a fault or a
    lost answer, `maybe_done`) whose message names this token, which no other refusal
    does (our tokens are 40 hex digits of a hash, `common.request_token`)."""
    return not exc.maybe_done and exc.code not in THROTTLE_CODES and token in str(exc)
