"""How a Prolific participant reaches a study and leaves it: the entry URL (`/p/{slug}`
with the study's entry key and the participant, study and session ids), the entry key
that proves a URL came from the researcher's dashboard, and the completion URL.

The study's channel settings (`channels.prolific`) name the URL parameters
(`participant_param`, `study_param`, `session_param`; Prolific's own names by default).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any
from urllib.parse import quote, unquote

from app.models import Channel

# Prolific's placeholders, which it fills in with the participant's ids.
PLACEHOLDERS = ("{{%PROLIFIC_PID%}}", "{{%STUDY_ID%}}", "{{%SESSION_ID%}}")
# The study's URL parameters (`channels.prolific`) and Prolific's placeholder for each.
PROLIFIC_IDS = {
    "participant_param": "PROLIFIC_PID",
    "study_param": "STUDY_ID",
    "session_param": "SESSION_ID",
}
# The entry key's URL parameter (a study's parameter names may not take it).
KEY_PARAM = "key"
# Where a participant's browser goes to finish a study with a code (set it as the
# study's redirect URL so the completion code is entered for them).
COMPLETE_URL = "https://app.prolific.com/submissions/complete?cc={code}"


def channel_of(study: Any) -> dict:
    """The study's Prolific settings (`channels.prolific`), {} when it has none."""
    return (study.channels or {}).get(Channel.prolific.value) or {}


def entry_key(secret_key: str, slug: str) -> str:
    """The study's entry key: proves an entry URL came from the researcher's dashboard.

    Derived from the secret key (HMAC of the slug), so it needs no storage and changes
    with the secret key. Its domain string keeps the channel's former name ("panel"): a
    new one would void every URL participants already hold.
    """
    mac = hmac.new(secret_key.encode(), b"ebc-panel-entry\0" + slug.encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(mac.digest()[:16]).rstrip(b"=").decode()


def entry_url(base_url: str, secret_key: str, study: Any) -> str:
    """The URL to paste into Prolific: each id parameter carries a placeholder named after
    the parameter (`pid={{%pid%}}` for a renamed `participant_param`)."""
    settings = channel_of(study)
    names = [settings.get(param) or name for param, name in PROLIFIC_IDS.items()]
    ids = "&".join(f"{quote(n)}={{{{%{quote(n)}%}}}}" for n in names)
    key = entry_key(secret_key, study.slug)
    return f"{base_url.rstrip('/')}/p/{study.slug}?{KEY_PARAM}={key}&{ids}"


def placeholder_url(base_url: str, secret_key: str, study: Any) -> str:
    """The entry URL with Prolific's own placeholders (what a Prolific study is made with).

    `entry_url` names each placeholder after the study's URL parameter; Prolific
    substitutes only its own names, so the parameters keep the study's names and take
    Prolific's placeholders.
    """
    url = entry_url(base_url, secret_key, study)
    settings = channel_of(study)
    placeholder = {settings.get(param) or name: name for param, name in PROLIFIC_IDS.items()}
    base, _, query = url.partition("?")
    pairs = []
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if unquote(name) in placeholder:
            value = "{{%" + placeholder[unquote(name)] + "%}}"
        pairs.append(f"{name}={value}")
    return f"{base}?{'&'.join(pairs)}"


def completion_url(code: str) -> str:
    """The URL that completes a Prolific submission with `code` (the study's redirect)."""
    return COMPLETE_URL.format(code=quote(code, safe=""))
