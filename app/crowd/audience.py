"""Who may take part through a platform (issue 33): the platform's prescreeners from the
study file, and the people of the earlier studies the study excludes
(`participants.exclude_studies`), as the posting carries them (`PostingSpec`) and as the
Crowd page shows them before anything is published.

Our records refuse the people of excluded studies at entry on every channel
(`app.annotation.participants.check_not_excluded`); a platform with a way of its own
(`Capabilities.excludes_earlier`) also keeps them from seeing the study: Prolific's
previous-studies blocklist (the earlier studies' Prolific ids), an MTurk qualification
granted to the earlier workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.annotation.participants import earlier_workers, settings_of
from app.crowd.platform import Platform
from app.models import CrowdPosting, Study


@dataclass(frozen=True)
class Audience:
    """What the Crowd page shows of a platform's audience before publishing."""

    prescreeners: dict[str, Any] = field(default_factory=dict)
    excluded: list[str] = field(default_factory=list)  # the earlier studies' slugs found
    unknown: list[str] = field(default_factory=list)  # slugs named that no study has
    units: list[str] = field(default_factory=list)  # their units on this platform
    workers: int = 0  # their people through this platform's channel
    how: str = ""  # the platform's own way (`Capabilities.excludes_earlier`); "": ours only


def excluded_slugs(session: Session, study: Study) -> tuple[list[str], list[str]]:
    """The earlier studies named: (those found, those no study has)."""
    named = list(settings_of(study).get("exclude_studies") or [])
    found = (
        set(session.scalars(select(Study.slug).where(Study.slug.in_(named)))) if named else set()
    )
    return [s for s in named if s in found], [s for s in named if s not in found]


def earlier_units(session: Session, study: Study, platform: Platform) -> list[str]:
    """The platform's ids of the excluded studies' postings (a Prolific study's id)."""
    found, _ = excluded_slugs(session, study)
    if not found:
        return []
    rows = session.scalars(
        select(CrowdPosting.external_id)
        .join(Study, Study.id == CrowdPosting.study_id)
        .where(Study.slug.in_(found), CrowdPosting.provider == platform.name)
        .where(CrowdPosting.external_id.is_not(None))
        .order_by(CrowdPosting.id)
    )
    return list(dict.fromkeys(r for r in rows if r))


def audience(session: Session, study: Study, platform: Platform) -> Audience:
    found, unknown = excluded_slugs(session, study)
    return Audience(
        prescreeners=platform.prescreeners_of(study),
        excluded=found,
        unknown=unknown,
        units=earlier_units(session, study, platform) if found else [],
        workers=len(earlier_workers(session, study, platform.channel)) if found else 0,
        how=platform.caps.excludes_earlier,
    )


def spec_audience(session: Session, study: Study, platform: Platform) -> dict[str, Any]:
    """The `PostingSpec` fields of who may take part (see the module)."""
    how = platform.caps.excludes_earlier
    return {
        "prescreeners": platform.prescreeners_of(study),
        "exclude_units": tuple(earlier_units(session, study, platform)) if how else (),
        "exclude_workers": tuple(earlier_workers(session, study, platform.channel)) if how else (),
    }
