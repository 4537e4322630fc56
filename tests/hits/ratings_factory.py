"""Ratings studies with pairs inserted as the worker writes them (no worker), their HITs
built by `build_hits`: shared by the ratings HIT, service and page tests.

A pair is an `Item` with a prompt C (`prompt_words` words), a prefix W of the cell's
length, and the model's continuation (`continuation`, l_gen words, space-joined) with no
choices (`choices = []`), as `worker.runner.item_row` writes it. Attention pairs are the
worker's: extra `data` prefixes marked `is_attention`, whose continuation is a real one's
words shuffled (`provenance["attention"]`).

The prompt, the prefix and the continuation draw on three disjoint vocabularies, so a
page that shows a word of a pair's context can be caught doing it.
"""

from __future__ import annotations

import random

from sqlalchemy.orm import Session

from app.hits.service import build_hits
from app.models import Item, Study, StudyStatus
from app.studies.schemas import (
    AnnotatorSection,
    DatasetSection,
    HitSection,
    ModelSection,
    RatingsSection,
    StudyConfig,
)
from app.studies.service import create_study

PROMPT_WORDS = ["harbour", "captain", "winter", "ledger", "lantern", "orchard", "meadow"]
PREFIX_WORDS = ["copper", "violin", "thistle", "granite", "saffron", "pelican", "walnut"]
CONTINUATION_WORDS = ["river", "stone", "light", "city", "quiet", "north", "glass", "bread"]


def make_ratings_study(
    session: Session,
    *,
    slug: str = "rate",
    lengths: tuple[int, ...] = (10,),
    per_cell: int = 10,
    attention: int = 1,
    attention_items: int | None = None,
    replicas: int = 1,
    overlap_share: float = 0.0,
    prompt_words: int = 6,
    continuation_words: int = 8,
    scale_max: int = 5,
    step: float = 0.5,
    min_seconds_per_item: float = 1.0,
    mix: dict[str, int] | None = None,
    kinds: tuple[str, ...] = ("data", "model"),
    build: bool = True,
    **study_fields,
) -> Study:
    """A collecting ratings study with `per_cell` data and model pairs per length and
    (default) as many attention pairs as its HITs need."""
    config = StudyConfig(
        slug=slug,
        title=f"Study {slug}",
        type="ratings",
        model=ModelSection(name="gpt2"),
        dataset=DatasetSection(path="data/wiki.test.tokens"),
        prefix_lengths=list(lengths),
        kinds=list(kinds),
        items_per_cell=per_cell,
        prompt_words=prompt_words,
        seed=5,
        hits=HitSection(
            mix=mix or {"data": 5, "model": 5},
            attention=attention,
            replicas=replicas,
            overlap_share=overlap_share,
            overlap_replicas=3,
        ),
        annotators=AnnotatorSection(min_seconds_per_item=min_seconds_per_item),
        ratings=RatingsSection(
            continuation_words=continuation_words, scale_max=scale_max, step=step
        ),
    )
    study = create_study(session, config)
    for name, value in study_fields.items():
        setattr(study, name, value)
    rng = random.Random(slug)
    n_hits = per_cell // 5
    n_att = n_hits * attention if attention_items is None else attention_items

    def words(vocab: list[str], n: int) -> list[str]:
        return [rng.choice(vocab) for _ in range(n)]

    for length in lengths:
        for kind, n, is_att in (
            *((kind, per_cell, False) for kind in kinds),
            ("data", n_att, True),
        ):
            for i in range(n):
                continuation = words(CONTINUATION_WORDS, continuation_words)
                provenance: dict = {"made_by": "tests", "seed": rng.randrange(2**31)}
                if is_att:
                    provenance["attention"] = {"method": "the real continuation's words shuffled"}
                    rng.shuffle(continuation)
                session.add(
                    Item(
                        study_id=study.id,
                        length=length,
                        kind=kind,
                        index=per_cell + i if is_att else i,
                        is_attention=is_att,
                        words=" ".join(words(PREFIX_WORDS, length)),
                        prompt=" ".join(words(PROMPT_WORDS, prompt_words)) or None,
                        true_next_word=rng.choice(CONTINUATION_WORDS) if kind == "data" else None,
                        choices=[],
                        provenance=provenance,
                        continuation=" ".join(continuation),
                    )
                )
    session.flush()
    if build:
        build_hits(session, study)
        study.status = StudyStatus.collecting
        session.flush()
    return study
