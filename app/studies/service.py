"""Create and read studies. Services flush; the caller commits."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Study, User
from app.studies.schemas import (
    AnnotatorSection,
    ChannelSection,
    DatasetSection,
    DecodingSection,
    ExclusionSection,
    HitSection,
    ModelSection,
    PaymentSection,
    StudyConfig,
)


class StudyError(ValueError):
    """A study file or request that cannot be accepted, with a readable message."""


def load_config(path: Path) -> StudyConfig:
    """Read and validate a study file (TOML)."""
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StudyError(f"study file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise StudyError(f"{path}: not valid TOML: {exc}") from None
    try:
        return StudyConfig.model_validate(raw)
    except ValidationError as exc:
        raise StudyError(f"{path}: {format_validation_error(exc)}") from None


def format_validation_error(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'study'}: {err['msg']}" for err in exc.errors()
    )


def create_study(session: Session, config: StudyConfig, created_by: User | None = None) -> Study:
    if session.scalar(select(Study.id).where(Study.slug == config.slug)) is not None:
        raise StudyError(f"a study named {config.slug!r} already exists")
    study = Study(
        slug=config.slug,
        title=config.title,
        description=config.description,
        task=config.task,
        model_name=config.model.name,
        model_revision=config.model.revision,
        tokenizer_name=config.model.tokenizer,
        dataset_path=config.dataset.path,
        dataset_format=config.dataset.format,
        prefix_lengths=list(config.prefix_lengths),
        kinds=list(config.kinds),
        items_per_cell=config.items_per_cell,
        top_k=config.top_k,
        prompt_words=config.prompt_words,
        decoding=config.decoding.model_dump(),
        special_top1=config.special_top1,
        seed=config.seed,
        hit_layout={"mix": dict(config.hits.mix), "attention": config.hits.attention},
        replicas=config.hits.replicas,
        overlap_share=config.hits.overlap_share,
        overlap_replicas=config.hits.overlap_replicas,
        per_annotator_cap=config.annotators.per_annotator_cap,
        max_cell_share=config.annotators.max_cell_share,
        lease_seconds=round(config.annotators.lease_minutes * 60),
        min_ms_per_item=round(config.annotators.min_seconds_per_item * 1000),
        exclusions=config.exclusions.model_dump(),
        channels=config.channels.model_dump(),
        reward_cents=config.payment.reward_cents,
        platform_fee=config.payment.platform_fee,
        created_by_id=created_by.id if created_by else None,
    )
    session.add(study)
    session.flush()
    return study


def config_of(study: Study) -> StudyConfig:
    """The study file that recreates `study` (for exports and the provenance manifest)."""
    return StudyConfig(
        slug=study.slug,
        title=study.title,
        description=study.description,
        task=study.task,
        model=ModelSection(
            name=study.model_name, revision=study.model_revision, tokenizer=study.tokenizer_name
        ),
        dataset=DatasetSection(path=study.dataset_path, format=study.dataset_format),
        prefix_lengths=study.prefix_lengths,
        kinds=study.kinds,
        items_per_cell=study.items_per_cell,
        top_k=study.top_k,
        prompt_words=study.prompt_words,
        decoding=DecodingSection(**study.decoding),
        special_top1=study.special_top1,
        seed=study.seed,
        hits=HitSection(
            mix=study.hit_layout["mix"],
            attention=study.hit_layout["attention"],
            replicas=study.replicas,
            overlap_share=study.overlap_share,
            overlap_replicas=study.overlap_replicas,
        ),
        annotators=AnnotatorSection(
            per_annotator_cap=study.per_annotator_cap,
            max_cell_share=study.max_cell_share,
            lease_minutes=study.lease_seconds / 60,
            min_seconds_per_item=study.min_ms_per_item / 1000,
        ),
        exclusions=ExclusionSection(**study.exclusions),
        payment=PaymentSection(reward_cents=study.reward_cents, platform_fee=study.platform_fee),
        channels=ChannelSection(**study.channels),
    )


def list_studies(session: Session) -> list[Study]:
    return list(session.scalars(select(Study).order_by(Study.created_at.desc(), Study.id.desc())))


def get_study(session: Session, slug: str) -> Study | None:
    return session.scalar(select(Study).where(Study.slug == slug))
