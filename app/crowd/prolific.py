"""Prolific through its REST API (https://docs.prolific.com/api-reference), with httpx.

One of our studies is one Prolific study. `prepare` creates it as a draft whose
`external_study_url` is our panel URL (`/p/{slug}` with the study's entry key and
Prolific's `{{%PROLIFIC_PID%}}`, `{{%STUDY_ID%}}`, `{{%SESSION_ID%}}` placeholders) and
whose completion code is the one the panel page shows; `publish` moves it to ACTIVE
(once, whatever the number of units); a participant's Prolific *submission* (its id is
the `SESSION_ID` our panel entry stores) is what we approve, reject and bonus.

A place is one participant. By default a participant does one HIT, so places = the
assignments wanted; with `hits_per_participant` > 1 one submission covers a bundle of
HITs (the panel page keeps offering HITs and shows the completion code from the first
one on), the reward per place is the bundle's and places are `places_for(...)`.

Rules of the provider interface (app.crowd.base) as Prolific allows them:

- every failure is a `CrowdError` carrying Prolific's own message; 429 and 5xx are
  retried with exponential backoff (honouring `Retry-After`) a bounded number of times;
- approve and reject are idempotent on Prolific's side; a transition refused because the
  submission is already in the state asked for is reported as `AlreadyDone`;
- a bonus is two calls (set up a bulk bonus payment, then pay it) and Prolific's pay call
  is *not* idempotent, so it is never retried once it may have reached Prolific (only a
  429 or a connection that was never made is retried). The caller's request token makes
  a retried bonus in this provider reuse its set-up payment and never pay twice; a pay
  call whose outcome is unknown is refused again (`retryable=False`, `maybe_done=True`)
  until someone checks the submission's bonuses (`submission_bonuses_cents`). That state
  lives in this object only; across processes the ledger (`app.crowd.ledger`) keeps the
  promise: a bonus whose earlier attempt may have been paid is finished as done when
  Prolific lists it, and refused for a manual check when it does not;
- creating the draft study (POST /studies/) is not idempotent, so it is never retried once
  it may have reached Prolific; a publish run that may have made one before (interrupted,
  or its answer lost) finds it by its internal name, which carries the posting's key
  (`find_prepared`), instead of making a second study;
- Prolific's API has no block call: `block`/`unblock` raise `Unsupported` saying what to
  do instead; the ledger blocks the participant here (their entries are refused) and
  records that Prolific was not told;
- the API token is a secret: it is sent only in the `Authorization` header and appears
  in no message, log line or repr.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from enum import Enum, StrEnum
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from app.crowd.base import (
    AlreadyDone,
    CostEstimate,
    CrowdError,
    PlatformSubmission,
    PostingSpec,
    UnitToPublish,
    Unsupported,
)

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.prolific.com/api/v1/"
# Where a participant's browser goes to finish a study with a code (set it as the
# panel's redirect URL so the completion code is entered for them).
COMPLETE_URL = "https://app.prolific.com/submissions/complete?cc={code}"
PLACEHOLDERS = ("{{%PROLIFIC_PID%}}", "{{%STUDY_ID%}}", "{{%SESSION_ID%}}")
# Prolific's platform fee for a workspace without the academic discount (prolific.com
# pricing: 42.8% corporate, 33.3% academic or non-profit); VAT comes on top where it applies.
DEFAULT_FEE_RATE = 0.428
REJECTION_MESSAGE_MIN = 100  # characters Prolific requires in a rejection message
# Submission statuses that are not (yet) work handed in: a participant still in the study.
_IN_PROGRESS = {"ACTIVE", "RESERVED"}
_PLATFORM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_RETRY_STATUSES = {429, 500, 502, 503, 504}
_MAX_DELAY = 30.0
_MAX_PAGES = 200  # of a listing of the workspace's studies

M = TypeVar("M", bound=BaseModel)


class RejectionCategory(StrEnum):
    """`rejection_category` values of POST /submissions/{id}/transition/ (action REJECT)."""

    BAD_CODE = "BAD_CODE"
    FAILED_CHECK = "FAILED_CHECK"
    FAILED_INSTRUCTIONS = "FAILED_INSTRUCTIONS"
    INCOMP_LONGITUDINAL = "INCOMP_LONGITUDINAL"
    LOW_EFFORT = "LOW_EFFORT"
    MALINGERING = "MALINGERING"
    NO_CODE = "NO_CODE"
    NO_DATA = "NO_DATA"
    OTHER = "OTHER"
    TOO_QUICKLY = "TOO_QUICKLY"
    TOO_SLOWLY = "TOO_SLOWLY"
    UNSUPP_DEVICE = "UNSUPP_DEVICE"


class ProlificError(CrowdError):
    """A Prolific call failed; `status` is the HTTP status when Prolific answered."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        retryable: bool = False,
        maybe_done: bool = False,
    ):
        super().__init__(message, code=code, retryable=retryable, maybe_done=maybe_done)
        self.status = status


# -- what we send (field names as Prolific's API reference spells them) ---------------


class _Send(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CompletionCodeAction(_Send):
    action: str = "MANUALLY_REVIEW"  # we approve after checking our own copy


class CompletionCode(_Send):
    code: str
    code_type: str = "COMPLETED"
    actions: list[CompletionCodeAction] = Field(default_factory=lambda: [CompletionCodeAction()])


class SelectedRange(_Send):
    lower: float | None = None
    upper: float | None = None


class StudyFilter(_Send):
    filter_id: str
    selected_range: SelectedRange | None = None
    selected_values: list[str] | None = None


class CreateStudy(_Send):
    """Body of POST /studies/ (a draft study)."""

    name: str
    internal_name: str
    description: str
    external_study_url: str
    prolific_id_option: str = "url_parameters"
    completion_codes: list[CompletionCode]
    total_available_places: int
    estimated_completion_time: int  # minutes
    reward: int  # per place, in the account currency's cents
    device_compatibility: list[str] = Field(default_factory=lambda: ["desktop", "tablet", "mobile"])
    filters: list[StudyFilter] = Field(default_factory=list)


class Transition(_Send):
    """Body of POST /studies/{id}/transition/."""

    action: str  # PUBLISH, PAUSE, START, STOP


class SubmissionTransition(_Send):
    """Body of POST /submissions/{id}/transition/."""

    action: str  # APPROVE, REJECT
    message: str | None = None
    rejection_category: RejectionCategory | None = None


class BonusSetup(_Send):
    """Body of POST /submissions/bonus-payments/: `csv_bonuses` is `<submission id>,<amount>`
    with the amount in the study's currency as a decimal (1.50 is £1.50 / $1.50)."""

    study_id: str
    csv_bonuses: str


# -- what we read -------------------------------------------------------------------


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Study(_Read):
    id: str
    status: str | None = None
    internal_name: str | None = None
    total_available_places: int | None = None
    external_study_url: str | None = None


class Submission(_Read):
    id: str
    # The list endpoint names it `participant_id`, the retrieve endpoint `participant`.
    participant_id: str | None = Field(
        None, validation_alias=AliasChoices("participant_id", "participant")
    )
    status: str
    study_id: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    bonus_payments: list[float] | None = None  # pence / cents


class _Href(_Read):
    href: str | None = None


class _Links(_Read):
    next: _Href | None = None


class _Meta(_Read):
    count: int | None = None


class SubmissionPage(_Read):
    results: list[Submission]
    links: _Links | None = Field(None, validation_alias="_links")
    meta: _Meta | None = None


class StudyPage(_Read):
    results: list[Study]
    links: _Links | None = Field(None, validation_alias="_links")


class BulkBonusPayment(_Read):
    id: str


class WorkspaceBalance(_Read):
    currency_code: str | None = None
    total_balance: int | None = None
    available_balance: int | None = None


class _Detail(_Read):
    detail: Any = None
    title: str | None = None
    error_code: int | str | None = None
    additional_information: str | None = None


class _ErrorBody(_Read):
    error: _Detail | None = None
    detail: Any = None
    message: str | None = None


# -- helpers ------------------------------------------------------------------------


def places_for(assignments: int, hits_per_participant: int = 1) -> int:
    """Prolific places for `assignments` HIT assignments, `hits_per_participant` per place."""
    if hits_per_participant < 1:
        raise CrowdError("hits_per_participant must be at least 1")
    return math.ceil(max(assignments, 0) / hits_per_participant)


def price(
    spec: PostingSpec,
    assignments: int,
    *,
    fee_rate: float = DEFAULT_FEE_RATE,
    hits_per_participant: int = 1,
    bonus_cents: int = 0,
) -> CostEstimate:
    """Rewards for the places that `assignments` need, plus Prolific's platform fee
    (`fee_rate`, on rewards and on bonuses), rounded half up to the cent: its fee rules
    alone, so an estimate needs no token or network."""
    places = places_for(assignments, hits_per_participant)
    rewards = places * spec.reward_cents * hits_per_participant
    notes = [
        f"Prolific platform fee {fee_rate:.1%} of rewards and bonuses "
        "(EBC_PROLIFIC_FEE_RATE); VAT is added where it applies and is not included"
    ]
    if hits_per_participant > 1:
        notes.append(
            f"{places} places of {hits_per_participant} HITs each; a place is paid "
            "in full even if its participant stops early"
        )
    return CostEstimate(
        rewards_cents=rewards,
        fees_cents=_fee(rewards, fee_rate) + _fee(bonus_cents, fee_rate),
        bonuses_cents=bonus_cents,
        notes=tuple(notes),
    )


def internal_name(spec: PostingSpec) -> str:
    """The study's internal name on Prolific: the slug and the posting's key, which
    `find_prepared` looks for."""
    return f"ebc {spec.study_slug}" + (f" {spec.key}" if spec.key else "")


def completion_url(code: str) -> str:
    """The URL that completes a Prolific submission with `code` (the panel's redirect)."""
    return COMPLETE_URL.format(code=quote(code, safe=""))


def _cents_text(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def _fee(cents: int, rate: float) -> int:
    # Half-up to the cent, as a bill is rounded (round() would round half to even).
    return math.floor(cents * rate + 0.5)


def _id(value: str, what: str) -> str:
    """A Prolific id, checked before it goes into a URL path."""
    if not isinstance(value, str) or not _PLATFORM_ID.fullmatch(value):
        raise CrowdError(f"{value!r} is not a Prolific {what} id")
    return value


def _platform_message(response: httpx.Response) -> tuple[str, str | None]:
    """Prolific's own error message and code, from either of its error shapes."""
    try:
        body = _ErrorBody.model_validate(response.json())
    except (ValueError, ValidationError):
        text = response.text.strip()[:500]
        return (text or response.reason_phrase or "no message"), None
    parts: list[str] = []
    code = None
    if body.error is not None:
        if body.error.title:
            parts.append(body.error.title)
        if body.error.detail:
            parts.append(_flatten(body.error.detail))
        if body.error.additional_information:
            parts.append(body.error.additional_information)
        if body.error.error_code is not None:
            code = str(body.error.error_code)
    if body.message:
        parts.append(body.message)
    if body.detail:
        parts.append(_flatten(body.detail))
    return ("; ".join(parts) or response.reason_phrase or "no message"), code


def _flatten(detail: Any) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_flatten(v)}" for k, v in detail.items())
    if isinstance(detail, list):
        return "; ".join(_flatten(v) for v in detail)
    return str(detail)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    return float(value) if value.isdigit() else None


class _Retry(Enum):
    SAFE = "safe"  # retry 429, 5xx and lost connections: the call may be made again
    UNSAFE = "unsafe"  # retry only what never reached Prolific: 429, refused connections


# -- the provider -------------------------------------------------------------------


class ProlificProvider:
    """`CrowdProvider` for Prolific. Holds no database state and never commits."""

    name = "prolific"
    bonuses_listed_at_once = False  # a bulk bonus is paid asynchronously

    def __init__(
        self,
        token: str,
        *,
        api_url: str = DEFAULT_API_URL,
        environment: str = "production",
        workspace_id: str | None = None,
        fee_rate: float = DEFAULT_FEE_RATE,
        hits_per_participant: int = 1,
        max_retries: int = 4,
        backoff_seconds: float = 0.5,
        timeout_seconds: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not token:
            raise CrowdError("No Prolific API token: set EBC_PROLIFIC_API_TOKEN.")
        if hits_per_participant < 1:
            raise CrowdError("hits_per_participant must be at least 1")
        self.environment = environment
        self.workspace_id = workspace_id
        self.fee_rate = fee_rate
        self.hits_per_participant = hits_per_participant
        self.max_retries = max_retries
        self.backoff_seconds = backoff_seconds
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=api_url if api_url.endswith("/") else api_url + "/",
            headers={"Authorization": f"Token {token}", "Accept": "application/json"},
            timeout=timeout_seconds,
            transport=transport,
        )
        self._published: set[str] = set()
        # Bonuses by the caller's request token: the set-up payment made for it, and
        # whether its pay call went through (True) or may have (None: outcome unknown).
        self._bonus_setups: dict[str, str] = {}
        self._bonus_paid: dict[str, bool | None] = {}

    @classmethod
    def from_settings(cls, settings: Any, **options: Any) -> ProlificProvider:
        """A provider from `app.config.Settings` (token, URL, workspace, fee rate)."""
        secret = settings.prolific_api_token
        if secret is None or not secret.get_secret_value():
            raise CrowdError("No Prolific API token: set EBC_PROLIFIC_API_TOKEN.")
        return cls(
            secret.get_secret_value(),
            api_url=settings.prolific_api_url,
            workspace_id=settings.prolific_workspace_id,
            fee_rate=settings.prolific_fee_rate,
            **options,
        )

    def __repr__(self) -> str:  # never the token
        return f"ProlificProvider(api_url={str(self._http.base_url)!r})"

    def close(self) -> None:
        self._http.close()

    # -- money before publishing ------------------------------------------------------

    def estimate_cost(
        self, spec: PostingSpec, assignments: int, *, bonus_cents: int = 0
    ) -> CostEstimate:
        """Prolific's charge at this workspace's fee rate: `price` (no call to Prolific)."""
        return price(
            spec,
            assignments,
            fee_rate=self.fee_rate,
            hits_per_participant=self.hits_per_participant,
            bonus_cents=bonus_cents,
        )

    def balance_cents(self) -> int | None:
        """The workspace's available balance (its currency's cents), if a workspace is set."""
        if not self.workspace_id:
            return None
        path = f"workspaces/{_id(self.workspace_id, 'workspace')}/balance/"
        balance = self._get(path, WorkspaceBalance)
        return balance.available_balance

    # -- publishing ---------------------------------------------------------------------

    def study_body(self, spec: PostingSpec) -> CreateStudy:
        """The draft study for `spec` (checked: placeholders, completion code, places)."""
        missing = [p for p in PLACEHOLDERS if p not in spec.entry_url]
        if missing:
            raise CrowdError(
                "The study URL for Prolific must carry Prolific's placeholders "
                f"{', '.join(missing)}: give it the panel URL from the study's annotators page "
                "(participant, study and session parameters)."
            )
        if not spec.completion_code:
            raise CrowdError(
                "Prolific needs a completion code: set the study's panel completion code "
                "(channels.panel.completion_code), the code the panel page shows."
            )
        if spec.places < 1:
            raise CrowdError(
                "Prolific needs the number of places (participants) wanted: "
                "places_for(assignments, hits_per_participant)."
            )
        q = spec.qualifications
        if q.locales:
            raise CrowdError(
                "Prolific selects countries with its own filter choices, not ISO codes: "
                "remove the locale requirement and set the country filter on the draft study "
                "in Prolific before publishing."
            )
        if q.masters:
            raise CrowdError("Prolific has no Masters qualification: unset it for Prolific.")
        filters = []
        if q.min_approval_rate is not None:
            filters.append(
                StudyFilter(
                    filter_id="approval_rate",
                    selected_range=SelectedRange(lower=q.min_approval_rate, upper=100),
                )
            )
        if q.min_approved is not None:
            filters.append(
                StudyFilter(
                    filter_id="approval_numbers",
                    selected_range=SelectedRange(lower=q.min_approved),
                )
            )
        return CreateStudy(
            name=spec.title,
            internal_name=internal_name(spec),
            description=spec.description or spec.title,
            external_study_url=spec.entry_url,
            completion_codes=[CompletionCode(code=spec.completion_code)],
            total_available_places=spec.places,
            estimated_completion_time=max(1, spec.minutes_estimate * self.hits_per_participant),
            reward=spec.reward_cents * self.hits_per_participant,
            filters=filters,
        )

    def prepare(self, spec: PostingSpec) -> str:
        """Create the draft study; its Prolific id. Not idempotent, so retried only when
        the request never reached Prolific (a timeout or a 5xx may have made it)."""
        body = self.study_body(spec)
        study = self._send("POST", "studies/", body, Study, retry=_Retry.UNSAFE)
        return _id(study.id, "study")

    def find_prepared(self, spec: PostingSpec) -> str | None:
        """The study an interrupted `prepare` made (GET /studies/, every page): the one
        whose internal name is this posting's (`internal_name`), a live one first."""
        name = internal_name(spec)
        found: list[Study] = []
        path: str | None = "studies/"
        for _ in range(_MAX_PAGES):
            if path is None:
                break
            page = self._get(path, StudyPage)
            found += [s for s in page.results if s.internal_name == name]
            more = page.links.next.href if page.links and page.links.next else None
            base = str(self._http.base_url)
            path = more.removeprefix(base) if more and more.startswith(base) else None
        if len(found) > 1:
            log.warning("%d Prolific studies are named %r", len(found), name)
        found.sort(key=lambda s: s.status == "UNPUBLISHED")
        return _id(found[0].id, "study") if found else None

    def publish(self, external_id: str, spec: PostingSpec, unit: UnitToPublish) -> str:
        """Publish the study (once: every unit is a HIT of the same Prolific study)."""
        study_id = _id(external_id, "study")
        if study_id in self._published:
            return study_id
        status = self._get(f"studies/{study_id}/", Study).status
        if status == "UNPUBLISHED":
            self._send("POST", f"studies/{study_id}/transition/", Transition(action="PUBLISH"))
        elif status == "PAUSED":
            self._send("POST", f"studies/{study_id}/transition/", Transition(action="START"))
        elif status not in {"ACTIVE", "PUBLISHING", "SCHEDULED"}:
            raise ProlificError(
                f"The Prolific study {study_id} is {status}: it takes no more participants "
                "(increase its places in Prolific or publish a new posting).",
                code=status,
            )
        self._published.add(study_id)
        return study_id

    def submissions(
        self, external_id: str, unit_external_ids: Sequence[str]
    ) -> Iterator[PlatformSubmission]:
        """Every submission handed in or reviewed (all pages; not those still in progress)."""
        study_id = _id(external_id, "study")
        offset, limit = 0, 100
        while True:
            page = self._get(
                f"studies/{study_id}/submissions/",
                SubmissionPage,
                params={"limit": limit, "offset": offset},
            )
            for s in page.results:
                if s.status in _IN_PROGRESS or not s.participant_id:
                    continue
                yield PlatformSubmission(
                    external_assignment_id=s.id,
                    external_worker_id=s.participant_id,
                    external_hit_id=s.study_id or study_id,
                    status=s.status,
                    submitted_at=s.completed_at,
                )
            offset += len(page.results)
            count = page.meta.count if page.meta else None
            more = page.links.next.href if page.links and page.links.next else None
            if not page.results or (count is not None and offset >= count):
                return
            if count is None and page.links is not None and not more:
                return

    # -- reviewing and paying ---------------------------------------------------------

    def approve(self, external_assignment_id: str, *, feedback: str | None = None) -> None:
        """Approve a submission (pays its reward). Prolific sends no approval message."""
        self._review(external_assignment_id, SubmissionTransition(action="APPROVE"), "APPROVED")

    def reject(
        self,
        external_assignment_id: str,
        *,
        feedback: str,
        category: RejectionCategory | str = RejectionCategory.OTHER,
    ) -> None:
        """Reject a submission with the message (≥ 100 characters) and category Prolific
        requires; the message is sent to the participant."""
        message = (feedback or "").strip()
        if len(message) < REJECTION_MESSAGE_MIN:
            raise CrowdError(
                f"Prolific requires a rejection message of at least {REJECTION_MESSAGE_MIN} "
                f"characters explaining the reason to the participant ({len(message)} given)."
            )
        try:
            reason = RejectionCategory(category)
        except ValueError:
            names = ", ".join(c.value for c in RejectionCategory)
            raise CrowdError(f"Unknown Prolific rejection category {category!r}: {names}") from None
        body = SubmissionTransition(action="REJECT", message=message, rejection_category=reason)
        self._review(external_assignment_id, body, "REJECTED")

    def _review(self, submission_id: str, body: SubmissionTransition, target: str) -> None:
        path = f"submissions/{_id(submission_id, 'submission')}/transition/"
        try:
            self._send("POST", path, body)
        except ProlificError as exc:
            if exc.status is None or not 400 <= exc.status < 500 or exc.status == 429:
                raise
            try:
                current = self.submission(submission_id).status
            except CrowdError:
                raise exc from None
            if current == target:
                raise AlreadyDone(
                    f"Prolific submission {submission_id} is already {target}", code=current
                ) from exc
            if current == "PROCESSING":
                raise ProlificError(
                    f"Prolific is still processing a review of {submission_id}: sync later ({exc})",
                    status=exc.status,
                    code=current,
                    retryable=True,
                ) from exc
            raise

    def submission(self, submission_id: str) -> Submission:
        return self._get(f"submissions/{_id(submission_id, 'submission')}/", Submission)

    def submission_bonuses_cents(self, submission_id: str) -> list[int]:
        """The bonuses Prolific has paid on a submission (to reconcile an unknown outcome)."""
        return [round(b) for b in self.submission(submission_id).bonus_payments or []]

    def bonus(
        self,
        external_worker_id: str,
        external_assignment_id: str,
        amount_cents: int,
        *,
        reason: str,
        request_token: str,
    ) -> None:
        """Pay `amount_cents` on a submission: set up a bulk bonus payment, then pay it.

        `request_token` makes the call idempotent here: a retry with the same token reuses
        the set-up payment and, once paid, is `AlreadyDone`. Prolific shows no reason to
        the participant with a bonus (`reason` is kept by the caller's ledger).
        """
        if amount_cents <= 0:
            raise CrowdError("A bonus must be a positive amount.")
        if not request_token:
            raise CrowdError("A bonus needs the caller's request token.")
        paid = self._bonus_paid.get(request_token, False)
        if paid:
            raise AlreadyDone(f"bonus {request_token} was already paid on Prolific")
        if paid is None:
            raise ProlificError(
                f"The Prolific payment of bonus {request_token} may have gone through: check "
                f"the submission's bonuses on Prolific before paying it again.",
                retryable=False,
                maybe_done=True,
            )
        sub = self.submission(external_assignment_id)
        if sub.participant_id and sub.participant_id != external_worker_id:
            raise CrowdError(
                f"Prolific submission {external_assignment_id} belongs to another participant."
            )
        if not sub.study_id:
            raise CrowdError(f"Prolific did not say which study {external_assignment_id} is in.")
        setup_id = self._bonus_setups.get(request_token)
        if setup_id is None:
            body = BonusSetup(
                study_id=_id(sub.study_id, "study"),
                csv_bonuses=f"{sub.id},{_cents_text(amount_cents)}\n",
            )
            setup = self._send(
                "POST", "submissions/bonus-payments/", body, BulkBonusPayment, retry=_Retry.SAFE
            )
            setup_id = self._bonus_setups[request_token] = _id(setup.id, "bonus payment")
        self._bonus_paid[request_token] = None  # from here on the outcome may be unknown
        try:
            self._send("POST", f"bulk-bonus-payments/{setup_id}/pay/", None, retry=_Retry.UNSAFE)
        except ProlificError as exc:
            if exc.status is not None and 400 <= exc.status < 500:
                self._bonus_paid[request_token] = False  # refused: nothing was paid
                raise
            raise ProlificError(
                f"The Prolific payment of bonus {request_token} may have gone through ({exc}): "
                "check the submission's bonuses on Prolific before paying it again.",
                status=exc.status,
                code=exc.code,
                retryable=False,
                maybe_done=True,
            ) from exc
        self._bonus_paid[request_token] = True

    def block(self, external_worker_id: str, *, reason: str) -> None:
        raise Unsupported(
            "Prolific's API has no block call, so Prolific was not told. To keep the "
            "participant out of your future Prolific studies, add their participant id to "
            "a 'Custom Blocklist' screener, or report them to Prolific support.",
            code="Unsupported",
        )

    def unblock(self, external_worker_id: str, *, reason: str) -> None:
        raise Unsupported(
            "Prolific's API has no block call to undo, so Prolific was not told: remove "
            "the participant's id from any 'Custom Blocklist' screener in Prolific.",
            code="Unsupported",
        )

    def expire(self, external_id: str, unit_external_ids: Sequence[str]) -> None:
        """Stop the study: no new participants; those in progress may still submit."""
        study_id = _id(external_id, "study")
        status = self._get(f"studies/{study_id}/", Study).status
        if status in {"ACTIVE", "PAUSED", "SCHEDULED", "PUBLISHING"}:
            self._send("POST", f"studies/{study_id}/transition/", Transition(action="STOP"))
        self._published.discard(study_id)

    # -- HTTP ---------------------------------------------------------------------------

    def _get(self, path: str, model: type[M], *, params: dict | None = None) -> M:
        response = self._request("GET", path, params=params, retry=_Retry.SAFE)
        return self._parse(response, model)

    def _send(
        self,
        method: str,
        path: str,
        body: BaseModel | None,
        model: type[M] | None = None,
        *,
        retry: _Retry = _Retry.SAFE,
    ) -> Any:
        payload = body.model_dump(mode="json", exclude_none=True) if body is not None else None
        response = self._request(method, path, json=payload, retry=retry)
        return self._parse(response, model) if model is not None else None

    @staticmethod
    def _parse(response: httpx.Response, model: type[M]) -> M:
        try:
            return model.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            raise ProlificError(
                f"Prolific answered {response.request.method} {response.request.url.path} "
                f"with something unexpected: {str(exc)[:300]}",
                status=response.status_code,
            ) from None

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict | None = None,
        retry: _Retry,
    ) -> httpx.Response:
        attempt = 0
        while True:
            delay = None
            try:
                response = self._http.request(method, path, json=json, params=params)
            except httpx.TransportError as exc:
                # A connection never made reached nobody; anything later may have.
                never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if attempt >= self.max_retries or not (never_sent or retry is _Retry.SAFE):
                    raise ProlificError(
                        f"Prolific could not be reached ({type(exc).__name__}) on "
                        f"{method} {path}"
                        + ("" if never_sent else "; the call may have reached Prolific"),
                        retryable=never_sent or retry is _Retry.SAFE,
                        maybe_done=not never_sent,
                    ) from None
            else:
                if response.is_success:
                    return response
                status = response.status_code
                retryable = status == 429 or (status in _RETRY_STATUSES and retry is _Retry.SAFE)
                if not retryable or attempt >= self.max_retries:
                    message, code = _platform_message(response)
                    raise ProlificError(
                        f"Prolific refused {method} {path} ({status}): {message}",
                        status=status,
                        code=code or str(status),
                        retryable=status in _RETRY_STATUSES,
                    )
                delay = _retry_after(response)
            attempt += 1
            wait = min(
                _MAX_DELAY,
                delay if delay is not None else self.backoff_seconds * 2 ** (attempt - 1),
            )
            log.warning("Prolific %s %s: retry %d in %.1fs", method, path, attempt, wait)
            self._sleep(wait)
