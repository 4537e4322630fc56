"""A study with diagnostic kinds built as production builds it: items inserted (with the
worker's `items.reference` shape when the study has a reference model), HITs from
`build_hits`, annotators answering through the annotation service (`next_assignment`,
`submit`), round robin so that several annotators share the HITs.
"""

from __future__ import annotations

import random

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.annotation.identities import create_local_annotators
from app.annotation.leases import next_assignment
from app.hits.service import build_hits
from app.models import HitPosition, Item, Judgment, Study, StudyStatus
from app.studies.schemas import (
    AnnotatorSection,
    DatasetSection,
    HitSection,
    ModelSection,
    ReferenceSection,
    StudyConfig,
)
from app.studies.service import create_study
from app.studytypes.nextword.annotation import submit

LM_KINDS = ("data", "model", "data_corrupted@0.5", "model_corrupted@0.5", "random")
MT_KINDS = ("data", "model", "unrelated", "random")
WORDS = ["the", "of", "and", "river", "stone", "light", "city", "quiet", "north", "glass"]
# How often an annotator picks the model's top-1 word, by kind (the rest: another slot).
TOP1 = {"data": 0.5, "model": 0.4, "data_corrupted@0.5": 0.3, "model_corrupted@0.5": 0.25}


def reference_json(rng: np.random.Generator, choices: list[dict], model: str) -> dict:
    """One item's `items.reference` in the worker's contract shape, drawn at random."""
    probs = rng.dirichlet(np.ones(len(choices) + 1))
    gd = int(rng.random() < 0.6)
    tv = float(rng.beta(2, 3)) if gd else float(rng.beta(1, 6))
    top = choices[int(np.argmax(probs[:-1]))]["word"]
    return {
        "reference_model": model,
        "token": {
            "tv": tv,
            "js": tv * float(rng.uniform(0.5, 0.9)),
            "gd": gd,
            "vocab": 64,
        },
        "word_gd": int(top != choices[0]["word"]),
        "reference_top_word": top,
        "choice_probs": [float(p) for p in probs[:-1]],
        "none_prob": float(probs[-1]),
        "method": "token-level over a shared vocabulary of 64 tokens (tests)",
    }


def diagnostic_study(
    session: Session,
    slug: str = "dg",
    *,
    task: str = "lm",
    kinds: tuple[str, ...] = LM_KINDS,
    lengths: tuple[int, ...] = (5, 10),
    per_hit: int = 2,
    hits_per_length: int = 4,
    annotators: int = 6,
    reference: str | None = None,
    seed: int = 3,
) -> Study:
    """`hits_per_length` HITs per length, each with `per_hit` items of every kind and one
    attention item, answered by `annotators` round robin (attention items right)."""
    config = StudyConfig(
        slug=slug,
        title=f"Study {slug}",
        task=task,
        model=ModelSection(name="m"),
        dataset=DatasetSection(path="d.jsonl", format="jsonl" if task == "seq2seq" else "text"),
        reference=ReferenceSection(model=reference),
        prefix_lengths=list(lengths),
        kinds=list(kinds),
        items_per_cell=per_hit * hits_per_length,
        seed=7,
        hits=HitSection(mix=dict.fromkeys(kinds, per_hit), attention=1, overlap_share=0.0),
        annotators=AnnotatorSection(min_seconds_per_item=0),
    )
    study = create_study(session, config)
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    for length in lengths:
        for kind in (*kinds, "attention"):
            att = kind == "attention"
            for i in range(hits_per_length if att else per_hit * hits_per_length):
                words = rng.sample(WORDS, 5)
                probs = [0.97, 0.01, 0.01, 0.005, 0.005] if att else [0.4, 0.3, 0.15, 0.1, 0.05]
                choices = [{"word": w, "prob": p} for w, p in zip(words, probs, strict=True)]
                session.add(
                    Item(
                        study_id=study.id,
                        length=length,
                        kind="data" if att else kind,
                        index=i,
                        is_attention=att,
                        words=" ".join(rng.choice(WORDS) for _ in range(length)),
                        source="ein Satz" if task == "seq2seq" else None,
                        true_next_word=words[0] if att or kind == "data" else None,
                        choices=choices,
                        provenance={"made_by": "tests"},
                        reference=reference_json(nrng, choices, reference) if reference else None,
                    )
                )
    session.flush()
    build_hits(session, study)
    study.status = StudyStatus.collecting
    session.flush()
    people = (
        create_local_annotators(session, study, annotators, label="person") if annotators else []
    )
    busy = True
    while busy:
        busy = False
        for person in people:
            work = next_assignment(session, person).assignment
            if work is None:
                continue
            busy = True
            rows = session.execute(
                select(HitPosition.position, HitPosition.choice_order, Item.kind, Item.is_attention)
                .join(Item, Item.id == HitPosition.item_id)
                .where(HitPosition.hit_id == work.hit_id)
                .order_by(HitPosition.position)
            ).all()
            answers = {}
            for position, order, kind, att in rows:
                top = order.index(0)
                if att or rng.random() < TOP1.get(kind, 0.2):
                    answers[position] = top
                else:
                    others = [s for s, r in enumerate(order) if r != 0]
                    answers[position] = rng.choice(others)
            submit(session, person, work.public_id, answers, {p: 3000 for p in answers})
    session.flush()
    return study


def cell_means(session: Session, study: Study) -> dict[tuple[int, str], float]:
    """Mean d of the judgments on regular items per (length, kind), from the tables."""
    rows = session.execute(
        select(Item.length, Item.kind, Judgment.d)
        .join(Judgment, Judgment.item_id == Item.id)
        .where(Item.study_id == study.id, Item.is_attention.is_(False))
    ).all()
    sums: dict[tuple[int, str], list[float]] = {}
    for length, kind, d in rows:
        sums.setdefault((length, kind), []).append(d)
    return {k: float(np.mean(v)) for k, v in sums.items()}


def reference_means(session: Session, study: Study) -> dict[tuple[int, str, str], float]:
    """Mean of each metric over the shown, non-attention items per (length, kind, metric),
    from the stored JSON."""
    rows = session.execute(
        select(Item.length, Item.kind, Item.reference).where(
            Item.study_id == study.id,
            Item.is_attention.is_(False),
            Item.skip_reason.is_(None),
            Item.reference.is_not(None),
        )
    ).all()
    values: dict[tuple[int, str, str], list[float]] = {}
    for length, kind, ref in rows:
        if not ref:
            continue
        token = ref.get("token") or {}
        for metric, v in (
            *((m, token.get(m)) for m in ("tv", "js", "gd")),
            ("word_gd", ref["word_gd"]),
        ):
            if v is not None:
                values.setdefault((length, kind, metric), []).append(float(v))
    return {k: float(np.mean(v)) for k, v in values.items()}


__all__ = ["cell_means", "diagnostic_study", "reference_json", "reference_means"]
