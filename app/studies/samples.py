"""People rate a model's forced-prefix samples (issue 34): a ratings study made from a
study's ``[samples]`` section.

Design: the new ratings study asks the worker for the very same continuations, rather than
copying the stored samples into items.  Its model, dataset, seed, prompt and decoding are the
study's, its lengths, kinds, items per cell and continuation length the samples' (l_gen =
``samples.words``, ancestral sampling): the worker makes a ratings item exactly as it made the
sample of the same length, kind and index (`worker.samples`), so people rate the samples shown
on the samples page, and the ratings study keeps everything a ratings study has (attention
pairs, EB-M's references, its precompute record).  Quality is rated alone, then consistency
(`app.studytypes.ratings`).  A translation model's samples are rated the same way: its ratings
items are the translations after the same forced target prefixes (DATA, NORMAL, UNREL, RAND; the
worker makes samples and items alike, `worker.samples`), shown with their source.
"""

from __future__ import annotations

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.audit.service import Actor, record_by
from app.models import Study, StudyType, User
from app.studies.schemas import StudyConfig
from app.studies.service import (
    MEMBER_ROLES,
    StudyError,
    config_of,
    create_study,
    format_validation_error,
    share_study,
    study_access,
)

PAIRS_PER_HIT = 10  # the later paper's assignment: 10 pairs


def ratings_config(config: StudyConfig, slug: str) -> StudyConfig:
    """The ratings study of ``config``'s forced-prefix samples, named ``slug`` (a
    `StudyError` says why there is none)."""
    section = config.samples
    if not section.per_kind:
        raise StudyError(f"{config.slug} asks for no forced-prefix samples: nothing to rate")
    kinds = section.kinds_for(config.task)
    per_kind = max(1, PAIRS_PER_HIT // len(kinds))
    raw = config.model_dump(mode="json")
    raw.update(
        slug=slug,
        title=f"Ratings of {config.title}'s forced-prefix samples"[:255],
        description=f"People rate the forced-prefix samples of study {config.slug}.",
        type=StudyType.ratings.value,
        prefix_lengths=list(section.lengths),
        kinds=kinds,
        items_per_cell=section.per_kind,
        hits={**raw["hits"], "mix": dict.fromkeys(kinds, min(per_kind, section.per_kind))},
        ratings={**raw["ratings"], **section.continuation()},  # as `worker.samples` makes them
        samples={"per_kind": 0},  # its items are the samples
        reference={},  # a ratings study has no reference model
        channels={},  # a new study's: no platform's identifiers copied
    )
    try:
        return StudyConfig.model_validate(raw)
    except ValidationError as exc:
        raise StudyError(f"cannot rate these samples: {format_validation_error(exc)}") from None


def create_ratings_of_samples(
    session: Session, study: Study, slug: str, created_by: User | None, *, by: Actor | None
) -> Study:
    """A draft ratings study of ``study``'s samples (`ratings_config`), asked for by
    ``created_by``; its precompute is planned as any study's, pinned to the dataset the
    samples were made from.  The copy has ``study``'s owner; one who asks without owning
    ``study`` (a manage-level member) becomes a member of the copy with their own level, so
    nobody gets more of the copy than they have of ``study`` (an administrator has it all)."""
    made = create_study(session, ratings_config(config_of(study), slug), None, by=by)
    made.created_by_id = study.created_by_id
    made.dataset_sha256 = study.dataset_sha256
    if created_by is not None and created_by.id != study.created_by_id:
        role = next(
            (r for r, a in MEMBER_ROLES.items() if a == study_access(session, study, created_by)),
            None,
        )
        if role is not None:
            share_study(session, made, created_by, role, by=by)
    session.flush()
    record_by(session, by, "ratings_of_samples", study=made, samples_of=study.slug)
    return made
