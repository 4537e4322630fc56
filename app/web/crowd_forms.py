"""The Crowd page's forms as the dashboard (`app.web.dashboard_crowd`) parses them: the
publish form, prefilled from the study file and sent back as the service's options, and
the bonus confirmation's lines. Bad input is a `BadInput` (a 4xx page)."""

from __future__ import annotations

import re

from pydantic import BaseModel

from app.crowd.common import PublishOptions, study_qualifications
from app.models import Study
from app.validation import BadInput, Line, parse_int


def _number(text: str, field: str, *, le: float) -> float:
    text = text.strip()
    if not re.fullmatch(r"[0-9]{1,6}(\.[0-9]{1,6})?", text):
        raise BadInput("must be a number such as 7 or 0.5", field)
    value = float(text)
    if value > le:
        raise BadInput(f"must be at most {le:g}", field)
    return value


def _optional_int(text: str, field: str, *, le: int) -> int | None:
    return parse_int(text, ge=0, le=le, field=field) if text.strip() else None


class PublishFields(BaseModel):
    """The publish form, as the preview (query) and the confirmation (form) carry it."""

    reward_cents: Line(12) = ""
    title: Line(128) = ""
    lifetime_days: Line(16) = "7"
    auto_approve_days: Line(16) = "3"
    min_approval_rate: Line(12) = ""
    min_approved: Line(12) = ""
    locales: Line(200) = ""
    masters: bool = False
    cap_qualification: bool = False
    hits_per_participant: Line(8) = "1"

    def options(self, study: Study, provider: str) -> PublishOptions:
        """The service's options; out-of-range values are refused by its `check`.

        The form is prefilled from the study file (`form_values`), so a qualification
        left as the file has it is sent as None (the study's) and only what the researcher
        changed overrides it; a number cleared where the file sets one is 0 (none).
        """
        given = study_qualifications(study, provider)
        locales = tuple(c.upper() for c in re.split(r"[\s,]+", self.locales) if c)
        return PublishOptions(
            reward_cents=_optional_int(self.reward_cents, "reward_cents", le=10**9),
            title=self.title.strip() or None,
            lifetime_days=_number(self.lifetime_days, "lifetime_days", le=10**6),
            auto_approve_days=_number(self.auto_approve_days, "auto_approve_days", le=10**6),
            min_approval_rate=_changed(self.min_approval_rate, "min_approval_rate", given),
            min_approved=_changed(self.min_approved, "min_approved", given),
            locales=None if locales == tuple(given.get("locales") or ()) else locales,
            masters=None if self.masters == bool(given.get("masters")) else self.masters,
            cap_qualification=self.cap_qualification,
        )

    def bundle(self) -> int:
        return parse_int(self.hits_per_participant, ge=1, le=1000, field="hits_per_participant")


def _changed(text: str, field: str, given: dict) -> int | None:
    """A number of the form: None where it is the study file's, 0 where it was cleared."""
    value = _optional_int(text, field, le=10**9)
    if value is None:
        return 0 if given.get(field) is not None else None
    return None if value == given.get(field) else value


def form_values(posting: dict | None, study: Study, provider: str) -> dict[str, str | bool]:
    """The publish form's values: the posting's own once it exists, else the defaults with
    the study file's qualifications (so that publishing unchanged keeps them)."""
    s = (posting or {}).get("settings") or {}
    if not s:
        given = study_qualifications(study, provider)
        s = {
            "lifetime_days": 7,
            "auto_approve_days": 3,
            "cap_qualification": True,
            "hits_per_participant": 1,
            **given,
        }

    def text(name: str) -> str:
        value = s.get(name)
        return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)

    return {
        "reward_cents": text("reward_cents"),
        "title": text("title"),
        "lifetime_days": text("lifetime_days"),
        "auto_approve_days": text("auto_approve_days"),
        "min_approval_rate": text("min_approval_rate"),
        "min_approved": text("min_approved"),
        "locales": " ".join(s.get("locales") or ()),
        "masters": bool(s.get("masters")),
        "cap_qualification": bool(s.get("cap_qualification")),
        "hits_per_participant": text("hits_per_participant") or "1",
    }


def bonus_lines(values: list[str]) -> list[tuple[str, int]]:
    """`public_id:n` pairs as the preview wrote them."""
    lines = []
    for value in values:
        public_id, _, n = value.rpartition(":")
        if not public_id:
            raise BadInput("a bonus line is an assignment and its bonus number", "bonus")
        lines.append((public_id, parse_int(n, ge=0, le=10_000, field="bonus")))
    return lines
