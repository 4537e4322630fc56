"""The crowd platforms, by name: one line each (see `app.crowd.platform` for what a platform
declares, `app/crowd/platforms/` for the platforms).

Everything that differs between platforms is asked of the registry (`platform(name)`,
`by_channel(channel)`) and the platform's declared capabilities and hooks, never of a
platform's name.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from app.crowd.base import CrowdServiceError
from app.crowd.platform import Capabilities, Platform
from app.crowd.platforms.local.platform import PLATFORM as LOCAL
from app.crowd.platforms.mturk.platform import PLATFORM as MTURK
from app.crowd.platforms.prolific.platform import PLATFORM as PROLIFIC
from app.models import Channel

PLATFORMS: dict[str, Platform] = {p.name: p for p in (MTURK, PROLIFIC, LOCAL)}
# What `--provider` and the Crowd page act on when none is named (MTurk, as before Prolific
# came; its sandbox costs nothing).
DEFAULT = MTURK.name
_BY_CHANNEL: dict[Channel, Platform] = {p.channel: p for p in PLATFORMS.values()}


def platform(name: str) -> Platform:
    """The platform `name`, or a 400 naming the platforms there are."""
    found = PLATFORMS.get(name)
    if found is None:
        raise CrowdServiceError(f"unknown provider {name!r}: one of {', '.join(PLATFORMS)}")
    return found


def by_channel(channel: Channel) -> Platform | None:
    """The platform whose annotators come through `channel` (None: no platform's, as an
    imported batch file's)."""
    return _BY_CHANNEL.get(channel)


def unverified_until_synced(channel: Channel) -> bool:
    """Whether work through `channel` is stored unverified until a sync confirms it."""
    found = _BY_CHANNEL.get(channel)
    return found is not None and found.caps.unverified_until_synced


def self_enrolling() -> list[Channel]:
    """The channels whose workers enrol themselves through a public URL."""
    return [p.channel for p in PLATFORMS.values() if p.caps.self_enrolment]


def entry_urls(settings: Any, study: Any) -> dict[str, str | None]:
    """Per platform whose workers enrol themselves, the URL to give it (None: the study's
    channel is off), as the Annotators page shows them."""
    return {
        p.name: p.entry_url(settings, study) for p in PLATFORMS.values() if p.caps.self_enrolment
    }


def capability_table() -> list[tuple[str, list[str]]]:
    """Every capability as a row: its name, and its value on each platform (the registry's
    order), in words (`ebc crowd platforms`, docs/crowd.md)."""

    def word(value: object) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, tuple):
            return ", ".join(value) or "none"
        return str(value) if value != "" else "none"

    rows = [("label", [p.label for p in PLATFORMS.values()])]
    for field in fields(Capabilities):
        rows.append((field.name, [word(getattr(p.caps, field.name)) for p in PLATFORMS.values()]))
    return rows


def page_order() -> list[Platform]:
    """The platforms as the Crowd page offers them: those crowds use today first
    (`Platform.page_rank`), then the registry's order."""
    return sorted(PLATFORMS.values(), key=lambda p: p.page_rank)


def page_default(study: Any) -> Platform:
    """The platform a study's Crowd page opens on: the first it enables, in `page_order`
    (the local channel, always on, last)."""
    return next(p for p in page_order() if p.enabled(study))


def bundling() -> list[Platform]:
    """The platforms on which a participant may do a bundle of HITs for one reward."""
    return [p for p in PLATFORMS.values() if p.caps.bundles]
