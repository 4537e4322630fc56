"""Who is asking: invite links, crowd identities (Prolific, MTurk), their entry checks and
the annotator's row lock that every writing request takes first (see app.annotation.leases)."""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from itsdangerous import BadData, URLSafeSerializer
from itsdangerous.encoding import base64_decode, base64_encode
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.annotation.errors import AnnotationError
from app.annotation.participants import check_not_excluded, earlier_labels
from app.annotation.queries import (
    ANNOTATOR_BY_PLATFORM_ID,
    LOCK,
    N_ANNOTATOR,
    RECENT_CROWD,
    RECENT_FROM,
    SET_NONCE,
    STUDY,
    STUDY_BY_SLUG,
)
from app.annotation.schemas import AnnotatorRef, InviteRef, StudyRef
from app.crowd.platforms.prolific.entry import KEY_PARAM, entry_key
from app.db import begin_write
from app.models import Annotator, Channel, Study, utcnow

INVITE_SALT = "ebc-invite"
MTURK_FRAME_ANCESTORS = (
    "https://worker.mturk.com",
    "https://www.mturk.com",
    "https://workersandbox.mturk.com",
)
MTURK_SUBMIT_ORIGINS = ("https://www.mturk.com", "https://workersandbox.mturk.com")
PREVIEW_ASSIGNMENT = "ASSIGNMENT_ID_NOT_AVAILABLE"


@functools.lru_cache(maxsize=8)
def _serializer(secret_key: str) -> URLSafeSerializer:
    return URLSafeSerializer(secret_key, salt=INVITE_SALT)


def _canonical(part: str) -> bool:
    """Is `part` the one base64 spelling of its bytes? (Its last character may carry unused
    bits: `...Kw` and `...Kx` decode alike; a decoder also skips stray characters.)"""
    try:
        return base64_encode(base64_decode(part)) == part.encode()
    except BadData:
        return False


_INVALID_LINK = "This link is not valid. Please use the link you were given."
# An itsdangerous token: URL-safe base64 of the payload (after a dot when zlib made it
# shorter), a dot, the signature. Anything else (control characters, other alphabets,
# over-long text) is refused before decoding.
_TOKEN = re.compile(r"\.?[A-Za-z0-9_-]{1,2000}\.[A-Za-z0-9_-]{20,100}")
# Platform ids (MTurk workerId / assignmentId / hitId: 12-30 uppercase letters and digits;
# Prolific PID / STUDY_ID / SESSION_ID: 24 hex digits) fit this with room for other platforms.
PLATFORM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SLUG = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def invite_token(secret_key: str, annotator: Annotator, session_id: str | None = None) -> str:
    """The signed token of `annotator`'s link: the link nonce (and the Prolific session) only.

    Rotating or clearing `invite_nonce` revokes it. No annotator id travels in it.
    """
    if annotator.invite_nonce is None:
        raise AnnotationError("This annotator's link was revoked.", 409)
    payload: list[object] = [annotator.invite_nonce]
    if session_id:
        payload.append(session_id)
    return _serializer(secret_key).dumps(payload)


def read_invite_token(secret_key: str, token: str) -> InviteRef:
    """Check the signature only (no database): a tampered token is refused here.

    Only the canonical encoding of a payload is accepted (base64 has several spellings of
    the same bytes): one link, one spelling. Links of the first format, signed
    `[annotator id, nonce, session?]`, still open (their nonce is checked the same way).
    """
    if len(token) > 2102 or not _TOKEN.fullmatch(token):
        raise AnnotationError(_INVALID_LINK, 404)
    try:
        payload = _serializer(secret_key).loads(token)
    except BadData:
        raise AnnotationError(_INVALID_LINK, 404) from None
    body, _, signature = token.rpartition(".")
    canonical = _canonical(body.removeprefix(".")) and _canonical(signature)
    if not isinstance(payload, list) or not canonical:
        raise AnnotationError(_INVALID_LINK, 404)
    legacy_id = None
    if payload and type(payload[0]) is int:  # the first format
        legacy_id, payload = payload[0], payload[1:]
    if not 1 <= len(payload) <= 2 or not all(isinstance(p, str) and p for p in payload):
        raise AnnotationError(_INVALID_LINK, 404)
    session_id = payload[1] if len(payload) == 2 else None
    if session_id is not None and not PLATFORM_ID.fullmatch(session_id):
        # Signed before Prolific ids were checked (e.g. a SESSION_ID longer than its column,
        # which made every load fail): the link still opens, without the session id.
        session_id = None
    return InviteRef(payload[0], session_id, legacy_id)


def create_local_annotators(
    session: Session, study: Study, count: int = 1, label: str | None = None
) -> list[Annotator]:
    """Create `count` invited annotators (channel local), each with its own link nonce."""
    if count < 1:
        raise AnnotationError("count must be at least 1")
    if label and label in earlier_labels(session, study):
        raise AnnotationError(
            f"{label!r} took part in an earlier study that this one excludes "
            "(participants.exclude_studies): no link was made",
            409,
        )
    made = [
        Annotator(
            study_id=study.id,
            channel=Channel.local,
            external_id=f"local-{secrets.token_hex(8)}",
            label=f"{label or 'invite'} {i + 1}" if count > 1 or not label else label,
            invite_nonce=secrets.token_urlsafe(16),
        )
        for i in range(count)
    ]
    session.add_all(made)
    session.flush()
    return made


def study_ref(session: Session, study_id: int) -> StudyRef:
    """The study's settings the annotator pages need, read now (they may change while it runs)."""
    row = session.execute(STUDY, {"study_id": study_id}).one()
    return StudyRef(*row)


def _lock_annotator(
    session: Session, key: int | str, now: datetime, *, by_nonce: bool = False
) -> AnnotatorRef | None:
    """Lock the annotator's row (by id, or by link nonce); their study's settings are
    read alongside.

    SQLite cannot return columns of an UPDATE's FROM table, so it reads the study next.
    """
    begin_write(session)
    session.flush()  # the Core statements below do not autoflush pending ORM changes
    params = {"key": key, "now": now}
    plain, with_study = LOCK[by_nonce]
    if session.get_bind().dialect.name == "postgresql":
        row = session.execute(with_study, params).first()
        if row is None:
            return None
        return AnnotatorRef(*row[:N_ANNOTATOR], study=StudyRef(*row[N_ANNOTATOR:]))
    row = session.execute(plain, params).first()
    if row is None:
        return None
    return AnnotatorRef(*row, study=study_ref(session, row.study_id))


def annotator_for_invite(
    session: Session, ref: InviteRef, now: datetime | None = None
) -> AnnotatorRef:
    """The annotator a signed link names, locked for this transaction (404 if revoked)."""
    annotator = _lock_annotator(session, ref.nonce, now or utcnow(), by_nonce=True)
    if (
        annotator is None
        or annotator.invite_nonce is None
        or not hmac.compare_digest(annotator.invite_nonce, ref.nonce)
        or (ref.annotator_id is not None and ref.annotator_id != annotator.id)
    ):
        raise AnnotationError("This link is no longer valid. Please ask for a new one.", 404)
    return annotator


@dataclass(frozen=True, slots=True)
class Enrolment:
    """Where a new crowd identity would come from, and the limits on making them.

    The client's address is kept only as its keyed hash (`address_key`), worked out when
    an identity is made.
    """

    secret_key: str
    address: str | None  # the client's address
    per_address_per_hour: int = 20  # new identities per address per study per hour; 0: off
    per_study_per_minute: int = 300  # new crowd identities per study per minute; 0: off


def address_key(secret_key: str, address: str | None) -> str | None:
    """A keyed hash of a client address (64 hex digits): the address itself is never kept.

    An IPv6 client holds a whole /64 (and can rotate through it at will), so its network is
    what is counted, not the single address.
    """
    if not address:
        return None
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        ip = None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        address = str(ipaddress.ip_network(f"{ip}/64", strict=False))
    digest = hmac.new(secret_key.encode(), b"ebc-enrol\0" + address.encode(), hashlib.sha256)
    return digest.hexdigest()


def platform_id(value: str | None, what: str = "worker id", *, required: bool = True) -> str | None:
    """A platform's id as sent, if it is one (letters, digits, - and _, at most 64)."""
    if not value:
        if required:
            raise AnnotationError(f"The platform did not send a {what}.", 400)
        return None
    if not PLATFORM_ID.fullmatch(value):
        raise AnnotationError(f"The platform sent a {what} that is not valid.", 400)
    return value


def _check_enrolment(
    session: Session,
    study: Study,
    channel: Channel,
    enrolment: Enrolment,
    key: str | None,
    now: datetime,
) -> None:
    """Refuse a new identity (429) past the study's limits (`key`: its address's
    `address_key`, counted within `channel`: each channel has its own bucket per address;
    the study's per-minute limit counts every crowd channel together). Soft limits: two
    first requests at the same instant may both pass, which is harmless at these rates."""
    if enrolment.per_study_per_minute > 0:
        n, _ = session.execute(
            RECENT_CROWD, {"study_id": study.id, "since": now - timedelta(minutes=1)}
        ).one()
        if n >= enrolment.per_study_per_minute:
            raise AnnotationError(
                "Many people are joining this study right now. Please try again in a minute.",
                429,
                retry_after=60,
            )
    if key and enrolment.per_address_per_hour > 0:
        since = now - timedelta(hours=1)
        params = {"study_id": study.id, "since": since, "key": key, "channel": channel}
        n, oldest = session.execute(RECENT_FROM, params).one()
        if n >= enrolment.per_address_per_hour:
            wait = 3600 - (now - oldest).total_seconds() if oldest is not None else 3600
            raise AnnotationError(
                "Too many new participants have joined this study from your network "
                "in the last hour. Please try again later.",
                429,
                retry_after=max(1, math.ceil(wait)),
            )


def crowd_annotator(
    session: Session,
    study: Study,
    channel: Channel,
    external_id: str,
    now: datetime | None = None,
    *,
    enrolment: Enrolment | None = None,
    namespace: str | None = None,
) -> AnnotatorRef:
    """The study's annotator for a platform id (MTurk workerId, Prolific participant), made once.

    A new identity is made only within `enrolment`'s limits (429 past them), and records
    the keyed hash of the address it came from. `namespace`: the id is one of that source's
    (an offline batch's tool installation), stored as `namespace:id`.
    """
    now = now or utcnow()
    external_id = platform_id(external_id)
    if namespace is not None:
        external_id = f"{namespace}:{external_id}"
    begin_write(session)
    session.flush()  # Core statements do not autoflush pending ORM changes
    key = {"study_id": study.id, "channel": channel, "external_id": external_id}
    annotator_id = session.scalar(ANNOTATOR_BY_PLATFORM_ID, key)
    if annotator_id is None:
        # People of the earlier studies named (`participants.exclude_studies`): refused.
        check_not_excluded(session, study, channel, external_id)
        address = None
        if enrolment is not None:
            address = address_key(enrolment.secret_key, enrolment.address)
            _check_enrolment(session, study, channel, enrolment, address, now)
        try:
            with session.begin_nested():
                new = Annotator(
                    study_id=study.id,
                    channel=channel,
                    external_id=external_id,
                    invite_nonce=secrets.token_urlsafe(16),
                    enrolled_from=address,
                    created_at=now,
                )
                session.add(new)
            annotator_id = new.id
        except IntegrityError:  # made by a concurrent first request
            annotator_id = session.scalar(ANNOTATOR_BY_PLATFORM_ID, key)
    annotator = _lock_annotator(session, annotator_id, now)
    assert annotator is not None
    if annotator.invite_nonce is None:
        annotator.invite_nonce = secrets.token_urlsafe(16)
        session.execute(SET_NONCE, {"annotator_id": annotator.id, "nonce": annotator.invite_nonce})
    return annotator


def study_by_slug(session: Session, slug: str) -> Study:
    if not _SLUG.fullmatch(slug):  # never sent to the database (NUL bytes, over-long text)
        raise AnnotationError("There is no such study.", 404)
    study = session.scalar(STUDY_BY_SLUG, {"slug": slug})
    if study is None:
        raise AnnotationError("There is no such study.", 404)
    return study


def channel_settings(study: Study | StudyRef, channel: Channel) -> dict:
    """The study's settings of a crowd channel, if the study takes people through it.

    Channels are opt-in: a study that does not enable one answers as if it did not exist
    (no oracle for which studies exist), so anyone who knows a slug cannot enrol.
    """
    settings = (study.channels or {}).get(channel.value) or {}
    if not settings.get("enabled"):
        raise AnnotationError("There is no such study.", 404)
    return settings


def check_prolific_key(secret_key: str, slug: str, params: Mapping[str, str]) -> None:
    """403 unless the entry carries the study's entry key (checked before any lookup)."""
    presented = (params.get(KEY_PARAM) or "").encode()
    if not hmac.compare_digest(presented, entry_key(secret_key, slug).encode()):
        raise AnnotationError(
            "This link did not come from the study's panel. Please open the study again "
            "from the panel's website.",
            403,
        )


def check_prolific_entry(study: Study, params: Mapping[str, str]) -> tuple[str, str | None]:
    """A Prolific entry's (participant id, session id), once its key was checked
    (`check_prolific_key`): 404 if the study takes nobody through Prolific, 403 for another
    Prolific study's id, 400 for ids that are not platform ids. The messages speak of "the
    panel": the participant's word for the site they came from."""
    prolific = channel_settings(study, Channel.prolific)
    expected = prolific.get("study_id")
    study_param = prolific.get("study_param") or "STUDY_ID"
    if expected and params.get(study_param) != expected:
        raise AnnotationError(
            "This link belongs to another study on the panel. Please open the study again "
            "from the panel's website.",
            403,
        )
    participant = platform_id(
        params.get(prolific.get("participant_param") or "PROLIFIC_PID"), "participant id"
    )
    session_id = platform_id(
        params.get(prolific.get("session_param") or "SESSION_ID"), "session id", required=False
    )
    return participant, session_id


def check_submit_to(study: Study | StudyRef, submit_to: str) -> str:
    """`turkSubmitTo` must be an MTurk site (or one the study lists, for a sandbox stand-in);
    the sandbox's only while the study is in the sandbox (`channels.mturk.sandbox`): free
    sandbox work must never count in a study in production."""
    mturk = study.channels.get(Channel.mturk.value) or {}
    extra = mturk.get("submit_origins") or []
    sandbox = mturk.get("sandbox", True)
    sites = [o for o in MTURK_SUBMIT_ORIGINS if sandbox or "sandbox" not in o]
    refused = AnnotationError("This page was opened with an unknown turkSubmitTo.", 400)
    if len(submit_to) > 1024 or not submit_to.isascii() or not submit_to.isprintable():
        raise refused
    try:
        parts = urlsplit(submit_to)
    except ValueError:  # e.g. an unbalanced "[" in the host
        raise refused from None
    origin = f"{parts.scheme}://{parts.netloc}"
    if origin in MTURK_SUBMIT_ORIGINS and origin not in sites:
        raise AnnotationError("This study takes no work from the MTurk sandbox.", 400)
    if origin not in (*sites, *extra) or parts.query or parts.fragment:
        raise refused
    return origin


def safe_redirect(url: str | None) -> str | None:
    """A study's return URL (Prolific's `redirect_url`) if it is an http(s) URL (never
    `javascript:` or `data:`)."""
    if not url or len(url) > 2048 or not url.isascii() or not url.isprintable():
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return url if parts.scheme in ("http", "https") and parts.netloc else None
