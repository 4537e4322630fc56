"""Studies with items inserted directly (no worker), shared by the HIT and page tests."""

from __future__ import annotations

import random

from sqlalchemy.orm import Session

from app.hits.service import build_hits
from app.models import Annotator, Item, Study, StudyStatus
from app.studies.schemas import DatasetSection, HitSection, ModelSection, StudyConfig
from app.studies.service import create_study

WORDS = ["the", "of", "and", "river", "stone", "light", "city", "quiet", "north", "glass"]


def make_study(
    session: Session,
    *,
    slug: str = "s1",
    lengths: tuple[int, ...] = (10, 20),
    per_cell: int = 20,
    attention: int = 1,
    attention_items: int | None = None,
    replicas: int = 1,
    overlap_share: float = 0.0,
    task: str = "lm",
    build: bool = True,
    words: list[str] | None = None,
    **study_fields,
) -> Study:
    """A collecting study with `per_cell` data and model items per length.

    Each length also gets `attention_items` (default: as many as the HITs
    need) attention items whose top-1 is the true next word with p = 0.97.
    """
    config = StudyConfig(
        slug=slug,
        title=f"Study {slug}",
        task=task,
        model=ModelSection(name="m"),
        dataset=DatasetSection(path="d.jsonl", format="jsonl" if task == "seq2seq" else "text"),
        prefix_lengths=list(lengths),
        items_per_cell=per_cell,
        seed=7,
        hits=HitSection(
            attention=attention, replicas=replicas, overlap_share=overlap_share, overlap_replicas=3
        ),
    )
    study = create_study(session, config)
    for name, value in study_fields.items():
        setattr(study, name, value)
    rng = random.Random(slug)
    vocab = words or WORDS
    n_att = per_cell // 5 * attention if attention_items is None else attention_items
    for length in lengths:
        for kind, n, is_att in (
            ("data", per_cell, False),
            ("model", per_cell, False),
            ("data", n_att, True),
        ):
            for i in range(n):
                choice_words = rng.sample(vocab, 5) if len(vocab) >= 5 else vocab[:5]
                probs = [0.97, 0.01, 0.01, 0.005, 0.005] if is_att else [0.4, 0.3, 0.15, 0.1, 0.05]
                session.add(
                    Item(
                        study_id=study.id,
                        length=length,
                        kind=kind,
                        index=i,
                        is_attention=is_att,
                        words=" ".join(rng.choice(vocab) for _ in range(length)),
                        source="ein Satz auf Deutsch" if task == "seq2seq" else None,
                        true_next_word=choice_words[0] if (is_att or kind == "data") else None,
                        choices=[
                            {"word": w, "prob": p}
                            for w, p in zip(choice_words, probs, strict=False)
                        ],
                        provenance={"made_by": "tests"},
                    )
                )
    session.flush()
    if build:
        build_hits(session, study)
        study.status = StudyStatus.collecting
        session.flush()
    return study


def annotator(session: Session, study: Study, name: str = "a", **fields) -> Annotator:
    from app.annotation.identities import create_local_annotators

    made = create_local_annotators(session, study, 1, label=name)[0]
    for key, value in fields.items():
        setattr(made, key, value)
    session.flush()
    return made
