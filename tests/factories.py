"""Studies, items, HITs, annotators and judgments inserted directly (no worker, no pages).

`StudyFactory` builds small hand-made sets (known answers); `bulk_judgments` inserts
large ones with executemany (exports, memory bounds).

Items get the choices ``w0 .. w{k-1}`` in model rank order (``w0`` is the top-1). A HIT
shows the item at position ``p`` with the ranks rotated by ``p``: screen slot ``s``
holds rank ``(s + p) % k``, so the screen slot and the model rank differ. Screen orders
end in ``"none"`` (slot k) as `app.hits.service.build_hits` stores them.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    Channel,
    Hit,
    HitPosition,
    Item,
    Judgment,
    Study,
    utcnow,
)
from app.studies.schemas import (
    DatasetSection,
    ExclusionSection,
    HitSection,
    ModelSection,
    StudyConfig,
)
from app.studies.service import create_study
from app.studytypes.nextword.hits import NONE_SLOT


def choice_order(position: int, k: int) -> list[int | str]:
    return [*((s + position) % k for s in range(k)), NONE_SLOT]


class StudyFactory:
    def __init__(
        self,
        session: Session,
        slug: str = "r1",
        *,
        lengths: Sequence[int] = (10,),
        kinds: Sequence[str] = ("data", "model"),
        top_k: int = 5,
        exclusions: dict | None = None,
        **fields,
    ) -> None:
        self.session = session
        self.k = top_k
        config = StudyConfig(
            slug=slug,
            title=f"Study {slug}",
            model=ModelSection(name="gpt2", revision="abc123", tokenizer="gpt2"),
            dataset=DatasetSection(path="data/wiki.test.tokens"),
            prefix_lengths=list(lengths),
            kinds=list(kinds),
            items_per_cell=10,
            top_k=top_k,
            seed=11,
            hits=HitSection(attention=1),
            exclusions=ExclusionSection(**(exclusions or {})),
        )
        self.study: Study = create_study(session, config)
        for name, value in fields.items():
            setattr(self.study, name, value)
        self._index = 0
        self._hit_index = 0
        self._annotators = 0
        session.flush()

    def item(
        self,
        kind: str = "data",
        length: int | None = None,
        *,
        attention: bool = False,
        true_rank: int | None = 0,
        skip_reason: str | None = None,
    ) -> Item:
        """An item; `true_rank` (0-based) places the true next word among the choices
        (None: not among them) for data and attention items."""
        self._index += 1
        words = [f"w{r}" for r in range(self.k)]
        true = None
        if kind == "data" or attention:
            true = words[true_rank] if true_rank is not None else "elsewhere"
        item = Item(
            study_id=self.study.id,
            length=length or self.study.prefix_lengths[0],
            kind=kind,
            index=self._index,
            is_attention=attention,
            words=" ".join(["word"] * (length or self.study.prefix_lengths[0])),
            true_next_word=true,
            choices=[{"word": w, "prob": round(0.5 / (r + 1), 4)} for r, w in enumerate(words)],
            skip_reason=skip_reason,
            provenance={"made_by": "tests", "kind": kind},
        )
        self.session.add(item)
        self.session.flush()
        return item

    def hit(self, items: Sequence[Item], *, overlap: bool = False) -> Hit:
        self._hit_index += 1
        hit = Hit(
            study_id=self.study.id,
            index=self._hit_index,
            length=items[0].length,
            replicas=1,
            is_overlap=overlap,
        )
        self.session.add(hit)
        self.session.flush()
        for p, item in enumerate(items):
            self.session.add(
                HitPosition(
                    hit_id=hit.id, position=p, item_id=item.id, choice_order=choice_order(p, self.k)
                )
            )
        self.session.flush()
        return hit

    def annotator(
        self,
        label: str | None = None,
        *,
        blocked: bool = False,
        exclude_past: bool = False,
        channel: Channel = Channel.local,
        external_id: str | None = None,
    ) -> Annotator:
        self._annotators += 1
        a = Annotator(
            study_id=self.study.id,
            channel=channel,
            external_id=external_id or f"ext{self._annotators}",
            label=label or f"a{self._annotators}",
            blocked=blocked,
            exclude_past=exclude_past,
        )
        self.session.add(a)
        self.session.flush()
        return a

    def answer(
        self,
        annotator: Annotator,
        hit: Hit,
        ranks: Sequence[int | None],
        *,
        client_ms: int | Sequence[int | None] = 4000,
        too_fast: Sequence[int] = (),
        late: bool = False,
    ) -> Assignment:
        """`annotator` submits `hit`: `ranks[p]` is the model rank (0-based) chosen at
        position p, None for "None of the above"; positions in `too_fast` are flagged."""
        now = utcnow()
        assignment = Assignment(
            public_id=secrets.token_urlsafe(32)[:43],
            hit_id=hit.id,
            annotator_id=annotator.id,
            status=AssignmentStatus.submitted,
            leased_at=now - timedelta(minutes=5),
            expires_at=now + timedelta(minutes=25),
            page_served_at=now - timedelta(minutes=4),
            submitted_at=now,
            late=late,
            external_assignment_id=f"asg-{secrets.token_hex(6)}",
        )
        self.session.add(assignment)
        self.session.flush()
        positions = self.session.execute(
            select(HitPosition.position, HitPosition.item_id)
            .where(HitPosition.hit_id == hit.id)
            .order_by(HitPosition.position)
        ).all()
        if len(ranks) != len(positions):
            raise ValueError(f"{len(ranks)} answers for {len(positions)} positions")
        times = [client_ms] * len(ranks) if isinstance(client_ms, int) else list(client_ms)
        for (p, item_id), rank in zip(positions, ranks, strict=True):
            order = choice_order(p, self.k)
            self.session.add(
                Judgment(
                    assignment_id=assignment.id,
                    position=p,
                    item_id=item_id,
                    option=order.index(NONE_SLOT if rank is None else rank),
                    chosen_rank=rank,
                    chosen_word=None if rank is None else f"w{rank}",
                    d=0.0 if rank == 0 else 1.0,
                    client_ms=times[p],
                    too_fast=p in too_fast,
                    late=late,
                )
            )
        self.session.flush()
        return assignment


def bulk_judgments(
    session: Session,
    factory: StudyFactory,
    *,
    n_hits: int,
    per_hit: int = 10,
    replicas: int = 1,
    n_annotators: int = 50,
    seed: int = 0,
) -> int:
    """`n_hits` HITs of `per_hit` items (half data, half model), each done by `replicas`
    different annotators, answers drawn at random; executemany inserts. Returns the
    number of judgments."""
    import numpy as np

    rng = np.random.default_rng(seed)
    study, k = factory.study, factory.k
    length = study.prefix_lengths[0]
    conn = session.connection()
    now = utcnow()
    words = [f"w{r}" for r in range(k)]
    choices = [{"word": w, "prob": round(0.5 / (r + 1), 4)} for r, w in enumerate(words)]
    n_items = n_hits * per_hit
    conn.execute(
        insert(Item),
        [
            {
                "study_id": study.id,
                "length": length,
                "kind": "data" if i % 2 == 0 else "model",
                "index": 100_000 + i,
                "is_attention": False,
                "words": "some words of a prefix",
                "true_next_word": "w0" if i % 2 == 0 else None,
                "choices": choices,
                "provenance": {"made_by": "bulk"},
                "created_at": now,
            }
            for i in range(n_items)
        ],
    )
    item_ids = (
        conn.execute(
            select(Item.id)
            .where(Item.study_id == study.id, Item.index >= 100_000)
            .order_by(Item.index)
        )
        .scalars()
        .all()
    )
    conn.execute(
        insert(Hit),
        [
            {"study_id": study.id, "index": 100_000 + h, "length": length, "created_at": now}
            for h in range(n_hits)
        ],
    )
    hit_ids = (
        conn.execute(
            select(Hit.id).where(Hit.study_id == study.id, Hit.index >= 100_000).order_by(Hit.index)
        )
        .scalars()
        .all()
    )
    conn.execute(
        insert(HitPosition),
        [
            {
                "hit_id": hit_ids[i // per_hit],
                "position": i % per_hit,
                "item_id": item_ids[i],
                "choice_order": choice_order(i % per_hit, k),
            }
            for i in range(n_items)
        ],
    )
    conn.execute(
        insert(Annotator),
        [
            {
                "study_id": study.id,
                "channel": Channel.mturk,
                "external_id": f"W{a:05d}",
                "label": f"worker {a}",
                "blocked": False,
                "exclude_past": False,
                "created_at": now,
            }
            for a in range(n_annotators)
        ],
    )
    annotator_ids = (
        conn.execute(
            select(Annotator.id).where(Annotator.study_id == study.id).order_by(Annotator.id)
        )
        .scalars()
        .all()[-n_annotators:]
    )
    rows = []
    for h, hid in enumerate(hit_ids):
        for a in rng.choice(n_annotators, size=replicas, replace=False):
            rows.append(
                {
                    "public_id": f"bulk-{h}-{a}",
                    "hit_id": hid,
                    "annotator_id": annotator_ids[a],
                    "status": AssignmentStatus.submitted,
                    "leased_at": now,
                    "expires_at": now,
                    "submitted_at": now,
                    "late": False,
                    "bonus_cents": 0,
                }
            )
    conn.execute(insert(Assignment), rows)
    assignments = conn.execute(
        select(Assignment.id, Assignment.hit_id)
        .join(Hit, Hit.id == Assignment.hit_id)
        .where(Hit.study_id == study.id, Hit.index >= 100_000)
        .order_by(Assignment.id)
    ).all()
    hit_number = {hid: h for h, hid in enumerate(hit_ids)}
    n = len(assignments) * per_hit
    ranks = rng.integers(-1, k, size=n)  # -1: none
    ms = rng.integers(500, 20_000, size=n)
    # Raw executemany with tuples: ~10x faster than dicts through SQLAlchemy.
    sqlite = conn.dialect.name == "sqlite"
    created = now.replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f") if sqlite else now
    rows = []
    for a, (aid, hid) in enumerate(assignments):
        base = hit_number[hid] * per_hit
        for p in range(per_hit):
            r = int(ranks[a * per_hit + p])
            rows.append(
                (
                    aid,
                    p,
                    item_ids[base + p],
                    k if r < 0 else (r - p) % k,  # the slot that shows rank r
                    None if r < 0 else r,
                    None if r < 0 else words[r],
                    0.0 if r == 0 else 1.0,
                    int(ms[a * per_hit + p]),
                    False,
                    False,
                    created,
                )
            )
    cols = "assignment_id, position, item_id, option, chosen_rank, chosen_word, d, client_ms, "
    cols += "too_fast, late, created_at"
    marks = ", ".join(["?" if sqlite else "%s"] * 11)
    conn.exec_driver_sql(f"INSERT INTO judgments ({cols}) VALUES ({marks})", rows)
    return n


# --------------------------------------------------------------------------- hand-made set


@dataclass
class HandMade:
    """The hand-made study of `make_handmade` (figures worked out in tests/results)."""

    factory: StudyFactory
    study: Study
    hit1: Hit
    hit2: Hit
    annotators: dict[str, Annotator]


def make_handmade(session: Session) -> HandMade:
    """A small hand-made study whose figures are worked out by hand in the tests.

    One length (10), k = 5. HIT1 = [D1, D2, M1, M2, ATT1], HIT2 = [D3, D4, M3, M4, ATT2]
    (the answers are model ranks, 0-based; None is "None of the above"):

        A  HIT1  [0, 1, 2, 0, 0]   D2 flagged too fast
        C  HIT1  [1, 1, 1, 1, 0]   blocked, past work excluded
        F  HIT1  [0, 1, 1, 0, 0]
        B  HIT2  [0, None, None, 3, 0]
        E  HIT2  [0, 0, 0, 0, 2]   fails the attention item (accuracy 0 < 0.5)

    True next words: D1, D3 the top-1; D2 rank 1 (w1); D4 not among the choices.
    """
    f = StudyFactory(session, "hand", min_ms_per_item=1000)
    d1, d2 = f.item("data"), f.item("data", true_rank=1)
    m1, m2 = f.item("model"), f.item("model")
    att1 = f.item("data", attention=True)
    d3, d4 = f.item("data"), f.item("data", true_rank=None)
    m3, m4 = f.item("model"), f.item("model")
    att2 = f.item("data", attention=True)
    hit1 = f.hit([d1, d2, m1, m2, att1])
    hit2 = f.hit([d3, d4, m3, m4, att2], overlap=True)
    a = {
        "A": f.annotator("A"),
        "B": f.annotator("B"),
        "C": f.annotator("C", blocked=True, exclude_past=True),
        "E": f.annotator("E"),
        "F": f.annotator("F"),
    }
    f.answer(a["A"], hit1, [0, 1, 2, 0, 0], too_fast=(1,), client_ms=[3000, 400, 5000, 6000, None])
    f.answer(a["C"], hit1, [1, 1, 1, 1, 0])
    f.answer(a["F"], hit1, [0, 1, 1, 0, 0])
    f.answer(a["B"], hit2, [0, None, None, 3, 0])
    f.answer(a["E"], hit2, [0, 0, 0, 0, 2])
    return HandMade(f, f.study, hit1, hit2, a)


# --------------------------------------------------------------------------- production-built set

# Dataset words and platform ids that a spreadsheet would run as formulas (CSV injection).
FORMULA_WORDS = ["=1+1", "+44", "-A1", "@SUM(A1)", "river", "stone", "light", "city", "quiet"]


def answered_study(session: Session, slug: str = "rt", *, seed: int = 5) -> Study:
    """A study built the way production builds it: HITs from `build_hits`, three annotators
    each doing one HIT through the annotation service with seeded random answers ("none"
    included). Its words, annotator labels and platform ids start with formula characters.
    """
    import random

    from app.annotation.leases import next_assignment
    from app.studytypes.nextword.annotation import submit
    from tests.hits.factory import annotator, make_study

    study = make_study(
        session, slug=slug, lengths=(10,), per_cell=15, words=FORMULA_WORDS, min_ms_per_item=0
    )
    people = [
        annotator(session, study, '=HYPERLINK("http://x.test")', channel=Channel.prolific,
                  external_id="-A1"),
        annotator(session, study, "@SUM(A1)", channel=Channel.mturk, external_id="+A2"),
        annotator(session, study, "\tlab member"),
    ]  # fmt: skip
    rng = random.Random(seed)
    for person in people:
        work = next_assignment(session, person).assignment
        assert work is not None, "the study has a HIT for each annotator"
        orders = session.execute(
            select(HitPosition.position, HitPosition.choice_order).where(
                HitPosition.hit_id == work.hit_id
            )
        ).all()
        answers = {p: rng.randrange(len(order)) for p, order in orders}
        submit(session, person, work.public_id, answers, {p: 3000 + p for p in answers})
    session.flush()
    return study


def broken_study(session: Session, slug: str = "broken", *, last: bool) -> StudyFactory:
    """2,500 judgments (two export batches) of which the first (or, with `last`, the last)
    item's choices are not a list, so the export cannot convert that item's rows: a failure
    before the first byte of an export, or after its first batch."""
    f = StudyFactory(session, slug)
    bulk_judgments(session, f, n_hits=250, n_annotators=20)
    edge = func.max(Item.id) if last else func.min(Item.id)
    target = session.scalar(select(edge).where(Item.study_id == f.study.id))
    session.execute(update(Item).where(Item.id == target).values(choices=5))
    return f
