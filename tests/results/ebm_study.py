"""A ratings study over a real dataset file, its items written as the worker writes them.

`worker.runner.item_row` writes a ratings item with its prompt (the line's first
``prompt_words`` words), its prefix, its continuation (l_gen words, space-joined), no choices
(``[]``), and a provenance that names its dataset ``line``; a data-line item also records the
line's next l_gen words (``provenance["data_continuation"]``, `worker.continuations`). Here
the continuations stand in for the model's: after a data prefix, the line's real continuation
with a third of its words replaced; after a model prefix, words drawn at random. So the
continuations after data prefixes are closer to the data, and EB-M > 1 for the scores with
references.

The corpus has long lines (every kind's) and a few short ones (prompts only): a model item
whose line ends before ``p + l + l_gen`` words has no data continuation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from app.models import Item, Study, StudyStatus
from app.precompute.datasets import file_sha256, load_dataset
from app.studies.schemas import (
    DatasetSection,
    HitSection,
    ModelSection,
    RatingsSection,
    StudyConfig,
)
from app.studies.service import create_study

VOCAB = [
    "the", "of", "and", "to", "a", "in", "was", "her", "it", "that", "she", "he", "not", "be",
    "had", "his", "with", "as", "for", "you", "on", "at", "by", "mr", "elizabeth", "darcy",
    "which", "could", "would", "said", "so", "all", "have", "been", "very", "but", "no", "my",
    "much", "more",
]  # fmt: skip
PROMPT, L_GEN = 3, 5
INJECTION = "=HYPERLINK(evil)"


def write_corpus(path: Path, *, long: int = 40, short: int = 6, seed: int = 0) -> Path:
    """`long` lines of 25-30 words and, every fifth line, one of 5 words (prompt only)."""
    rng = random.Random(seed)
    lines = []
    for i in range(long + short):
        n = 5 if i % 5 == 4 and short else rng.randint(25, 30)
        lines.append(" ".join(rng.choice(VOCAB) for _ in range(n)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass
class EbmStudy:
    study: Study
    dataset: Path
    texts: dict  # (length, kind) -> list of (continuation, reference or None)


def make_ebm_study(
    session: Session,
    dataset: Path,
    *,
    slug: str = "ebm",
    lengths: tuple[int, ...] = (4, 6),
    per_cell: int = 12,
    seed: int = 1,
) -> EbmStudy:
    config = StudyConfig(
        slug=slug,
        title=f"Study {slug}",
        type="ratings",
        model=ModelSection(name="gpt2"),
        dataset=DatasetSection(path=str(dataset)),
        prefix_lengths=list(lengths),
        kinds=["data", "model"],
        items_per_cell=per_cell,
        prompt_words=PROMPT,
        seed=seed,
        hits=HitSection(mix={"data": 5, "model": 5}, attention=0, replicas=1),
        ratings=RatingsSection(continuation_words=L_GEN),
    )
    study = create_study(session, config)
    study.status = StudyStatus.ready
    study.dataset_sha256 = file_sha256(dataset)
    rows = load_dataset(dataset).rows
    rng = random.Random(seed)
    texts: dict = {}
    for length in lengths:
        long_rows = [r for r in rows if len(r.words) >= PROMPT + length + L_GEN]
        for kind in ("data", "model"):
            # Data prefixes need the line's continuation; model prefixes only its prompt, so
            # they also take the short lines (no data continuation there).
            pool = long_rows if kind == "data" else rows
            order = rng.sample(range(len(pool)), per_cell)
            short = [i for i, r in enumerate(rows) if len(r.words) < PROMPT + length + L_GEN]
            if kind == "model" and short and not set(order) & set(short):
                order[0] = short[0]  # at least one model prompt without a data continuation
            for index, i in enumerate(order):
                row = pool[i]
                words = list(row.words)
                end = PROMPT + length
                real = words[end : end + L_GEN] if len(words) >= end + L_GEN else None
                if kind == "data":
                    prefix = words[PROMPT:end]
                    cont = [rng.choice(VOCAB) if rng.random() < 0.34 else w for w in real]
                    provenance = {"line": row.line, "data_continuation": " ".join(real)}
                    true_next = real[0]
                else:
                    prefix = [rng.choice(VOCAB) for _ in range(length)]
                    cont = [rng.choice(VOCAB) for _ in range(L_GEN)]
                    provenance = {"line": row.line}
                    true_next = None
                session.add(
                    Item(
                        study_id=study.id,
                        length=length,
                        kind=kind,
                        index=index,
                        words=" ".join(prefix),
                        prompt=" ".join(words[:PROMPT]),
                        true_next_word=true_next,
                        choices=[],
                        continuation=" ".join(cont),
                        provenance=provenance,
                    )
                )
                texts.setdefault((length, kind), []).append(
                    (" ".join(cont), " ".join(real) if real else None)
                )
        # Never scored: a skipped item and an attention pair (whose prompt a spreadsheet would
        # run as a formula, for the samples' export).
        session.add(
            Item(
                study_id=study.id, length=length, kind="model", index=per_cell, words="x",
                prompt="x", choices=[], continuation="zzz " * L_GEN, skip_reason="too_long",
                provenance={"line": rows[0].line},
            )
        )  # fmt: skip
        session.add(
            Item(
                study_id=study.id, length=length, kind="data", index=0, is_attention=True,
                words="y " * length, prompt=INJECTION, choices=[], continuation="qqq " * L_GEN,
                provenance={"line": rows[0].line, "attention": {"shuffled": True}},
            )
        )  # fmt: skip
    session.flush()
    return EbmStudy(study, dataset, texts)
