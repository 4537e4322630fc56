"""Create and read studies. Services flush; the caller commits."""

from __future__ import annotations

import hashlib
import tomllib
from enum import IntEnum
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.audit.service import Actor, record_by
from app.hits.schemas import BuildReport
from app.hits.service import build_hits
from app.models import (
    Hit,
    Item,
    PrecomputeJob,
    Study,
    StudyMember,
    StudyStatus,
    User,
    utcnow,
)
from app.precompute.service import active_job, cancel_job
from app.studies.schemas import SLUG, StudyConfig, config_from_columns, study_columns


class StudyError(ValueError):
    """A study file or request that cannot be accepted, with a readable message."""


def load_config(path: Path) -> StudyConfig:
    """Read and validate a study file (TOML)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StudyError(f"study file not found: {path}") from None
    return parse_config(text, str(path))


def parse_config(text: str, source: str = "study file") -> StudyConfig:
    """Validate the text of a study file (TOML)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise StudyError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise StudyError(f"{source}: nested far deeper than any study file") from None
    try:
        return StudyConfig.model_validate(raw)
    except ValidationError as exc:
        raise StudyError(f"{source}: {format_validation_error(exc)}") from None


def format_validation_error(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'study'}: {err['msg']}" for err in exc.errors()
    )


def slug_taken(session: Session, slug: str) -> bool:
    return session.scalar(select(Study.id).where(Study.slug == slug)) is not None


def create_study(
    session: Session,
    config: StudyConfig,
    created_by: User | None = None,
    *,
    by: Actor | None = None,
    source: str = "file",
) -> Study:
    """Store a new study; `source` says, in the audit log, whether it came from a study
    file or the dashboard's form."""
    if slug_taken(session, config.slug):
        raise StudyError(f"a study named {config.slug!r} already exists")
    study = Study(**study_columns(config), created_by_id=created_by.id if created_by else None)
    session.add(study)
    session.flush()
    record_by(session, by, "study_created", study=study, source=source)
    return study


def config_of(study: Study) -> StudyConfig:
    """The study file that recreates `study` (for exports and the provenance manifest)."""
    return config_from_columns(study)


def list_studies(session: Session) -> list[Study]:
    return list(session.scalars(select(Study).order_by(Study.created_at.desc(), Study.id.desc())))


# -- who may do what ---------------------------------------------------------------------


class Access(IntEnum):
    """What a researcher may do with a study; each level includes the ones below it.

    `view`: the study's pages, results and exports, but no secrets (invite links) and no
    changes. `manage`: everything the owner can do with the study. `share`: the owner and
    administrators, who may also add and remove members.
    """

    view = 1
    manage = 2
    share = 3


MEMBER_ROLES = {"view": Access.view, "manage": Access.manage}


def study_access(session: Session, study: Study, user: User) -> Access | None:
    """`user`'s access to `study`; None when they may not even know it exists."""
    if user.is_admin or (study.created_by_id is not None and study.created_by_id == user.id):
        return Access.share
    role = session.scalar(
        select(StudyMember.role).where(
            StudyMember.study_id == study.id, StudyMember.user_id == user.id
        )
    )
    return MEMBER_ROLES.get(role) if role else None


def visible_studies(session: Session, user: User) -> list[Study]:
    """The studies `user` may see, newest first (administrators: all of them)."""
    query = select(Study).order_by(Study.created_at.desc(), Study.id.desc())
    if not user.is_admin:
        shared = select(StudyMember.study_id).where(StudyMember.user_id == user.id)
        query = query.where(or_(Study.created_by_id == user.id, Study.id.in_(shared)))
    return list(session.scalars(query))


def share_study(
    session: Session, study: Study, user: User, role: str, *, by: Actor | None = None
) -> StudyMember:
    """Make `user` a member of `study` with `role` (or change their role)."""
    if role not in MEMBER_ROLES:
        raise StudyError(f"the role is one of {', '.join(MEMBER_ROLES)}, not {role!r}")
    if study.created_by_id == user.id:
        raise StudyError(f"{user.username} owns {study.slug}: nothing to share")
    member = session.scalar(
        select(StudyMember).where(StudyMember.study_id == study.id, StudyMember.user_id == user.id)
    )
    if member is None:
        member = StudyMember(study_id=study.id, user_id=user.id, role=role)
        session.add(member)
    member.role = role
    session.flush()
    record_by(session, by, "study_shared", study=study, member=user.username, role=role)
    return member


def unshare_study(session: Session, study: Study, user: User, *, by: Actor | None = None) -> None:
    member = session.scalar(
        select(StudyMember).where(StudyMember.study_id == study.id, StudyMember.user_id == user.id)
    )
    if member is None:
        raise StudyError(f"{user.username} is not a member of {study.slug}")
    session.delete(member)
    session.flush()
    record_by(session, by, "study_unshared", study=study, member=user.username)


def set_owner(session: Session, study: Study, user: User, *, by: Actor | None = None) -> None:
    """Give `study` to `user`; a membership they held becomes redundant and is removed."""
    study.created_by_id = user.id
    member = session.scalar(
        select(StudyMember).where(StudyMember.study_id == study.id, StudyMember.user_id == user.id)
    )
    if member is not None:
        session.delete(member)
    session.flush()
    record_by(session, by, "study_owner_set", study=study, owner=user.username)


def get_study(session: Session, slug: str) -> Study | None:
    if not SLUG.fullmatch(slug):  # names no study (and a NUL byte never reaches the database)
        return None
    return session.scalar(select(Study).where(Study.slug == slug))


def save_dataset(data_dir: Path, slug: str, filename: str, content: bytes) -> tuple[Path, str]:
    """Store an uploaded dataset under `data_dir/uploads/<slug>/`; returns (path, sha256).

    Only the file name's last component is kept, so an upload cannot write elsewhere.
    """
    name = Path(filename.replace("\\", "/")).name.strip() or "dataset.txt"
    if name.startswith("."):
        name = "dataset" + name
    while len(name.encode()) > 200:  # file systems take 255 bytes; keep the suffix
        name = name[1:]
    folder = (Path(data_dir) / "uploads" / slug).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(content)
    return path, hashlib.sha256(content).hexdigest()


def stop_precompute(session: Session, study: Study, *, by: Actor | None = None) -> PrecomputeJob:
    """Stop handing out the study's running precompute job's shards; items made so far stay."""
    job = active_job(session, study)
    if job is None:
        raise StudyError("No precompute job is running.")
    cancel_job(session, job)
    record_by(session, by, "precompute_cancelled", study=study, job=job.id)
    return job


def close_study(session: Session, study: Study, *, by: Actor | None = None) -> None:
    """Stop collection (annotators see "closed"); an unfinished precompute job is cancelled."""
    if study.status is StudyStatus.closed:
        raise StudyError("the study is already closed")
    job = active_job(session, study)
    if job is not None:
        cancel_job(session, job)
    study.status = StudyStatus.closed
    study.closed_at = utcnow()
    session.flush()
    record_by(session, by, "study_closed", study=study)


def reopen_study(session: Session, study: Study, *, by: Actor | None = None) -> None:
    """Back to where the study was: collecting if it has HITs, ready with items, else draft."""
    if study.status is not StudyStatus.closed:
        raise StudyError("only a closed study can be reopened")
    has_hits = session.scalar(select(Hit.id).where(Hit.study_id == study.id).limit(1))
    has_items = session.scalar(select(Item.id).where(Item.study_id == study.id).limit(1))
    if has_hits is not None:
        study.status = StudyStatus.collecting
    elif has_items is not None:
        study.status = StudyStatus.ready
    else:
        study.status = StudyStatus.draft
    study.closed_at = None
    session.flush()
    record_by(session, by, "study_reopened", study=study, status=study.status.value)


def build_and_open(
    session: Session, study: Study, *, open_: bool = True, by: Actor | None = None
) -> BuildReport:
    """Place the study's unplaced items into HITs and (`open_`) open the study to annotators:
    the dashboard's and `ebc hits build`'s one way to build."""
    if study.status not in (StudyStatus.ready, StudyStatus.collecting):
        raise StudyError(
            f"the study is {study.status.value}: HITs are built once its items are ready"
        )
    report = build_hits(session, study)
    if open_:
        study.status = StudyStatus.collecting
    session.flush()
    record_by(session, by, "hits_built", study=study, hits=report.hits, leftovers=report.leftovers)
    return report


def set_study_cap(session: Session, study: Study, cap: int, *, by: Actor | None = None) -> None:
    """The most HITs an annotator without a cap of their own may do."""
    if cap < 1:
        raise StudyError("the cap must be at least 1 HIT")
    study.per_annotator_cap = cap
    session.flush()
    record_by(session, by, "study_cap_changed", study=study, cap=cap)
