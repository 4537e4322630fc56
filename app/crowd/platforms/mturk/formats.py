"""What MTurk reads and writes besides plain parameters: the ExternalQuestion XML, an
assignment's answer XML, qualification requirements and money as decimal strings.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from decimal import Decimal, InvalidOperation
from typing import Any
from xml.sax.saxutils import escape

from app.crowd.base import CrowdError, Qualifications

log = logging.getLogger(__name__)

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
# MTurk appends these to the ExternalURL itself; a URL that carries one is refused.
RESERVED_PARAMS = ("assignmentId", "hitId", "turkSubmitTo", "workerId")

REWARD_PATTERN = re.compile(r"^\d+\.\d{2}$")
_MAX_ANSWER_XML = 1_000_000


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
    # Custom qualifications the worker must not have: the cap reached, an earlier study's.
    for own in (q.cap_qualification_id, q.exclusion_qualification_id):
        if own:
            out.append(
                {
                    "QualificationTypeId": own,
                    "Comparator": "DoesNotExist",
                    "ActionsGuarded": guarded,
                }
            )
    return out
