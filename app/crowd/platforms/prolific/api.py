"""Prolific's REST API as we use it (https://docs.prolific.com/api-reference): the bodies
we send and the answers we read, as pydantic models with the field names Prolific's API
reference spells, its rejection categories, and its two shapes of error body.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Any

import httpx
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from app.crowd.base import CrowdError

REJECTION_MESSAGE_MIN = 100  # characters Prolific requires in a rejection message
_PLATFORM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


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


def prolific_id(value: str, what: str) -> str:
    """A Prolific id, checked before it goes into a URL path."""
    if not isinstance(value, str) or not _PLATFORM_ID.fullmatch(value):
        raise CrowdError(f"{value!r} is not a Prolific {what} id")
    return value


def platform_message(response: httpx.Response) -> tuple[str, str | None]:
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
