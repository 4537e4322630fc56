"""Read-only views of a study for the dashboard: collection progress, HITs, items.

Counts leave attention items out of the cells (they are kept out of CGD); a
cell's target is the judgments its placed items are meant to get (one per
replica of their HIT); a ratings study's cells count ratings (one per rater and
pair) instead, and how many have their consistency too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session

from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    Hit,
    HitPosition,
    Item,
    Judgment,
    Study,
    StudyMember,
    User,
    utcnow,
)
from app.studytypes.registry import study_type_of


@dataclass(frozen=True)
class CellCollection:
    length: int
    kind: str
    items: int  # made (not skipped, not attention)
    placed: int  # in a HIT
    judgments: int  # a ratings study: ratings (a pair's quality given)
    target: int
    consistency: int | None = None  # a ratings study: ratings with the consistency too

    @property
    def share(self) -> float:
        return min(1.0, self.judgments / self.target) if self.target else 0.0


@dataclass(frozen=True)
class HitRow:
    index: int
    length: int
    replicas: int
    is_overlap: bool
    submitted: int
    leased: int

    @property
    def share(self) -> float:
        return min(1.0, self.submitted / self.replicas) if self.replicas else 0.0


@dataclass(frozen=True)
class HitSummary:
    hits: int
    complete: int
    started: int
    slots: int
    submitted: int
    leased: int


def collection_progress(session: Session, study: Study) -> list[CellCollection]:
    """Per (length, kind) cell of the study: items, placed items, judgments / target."""
    base = and_(Item.study_id == study.id, Item.is_attention.is_(False))
    made = dict(
        (((ln, kd), n))
        for ln, kd, n in session.execute(
            select(Item.length, Item.kind, func.count())
            .where(base, Item.skip_reason.is_(None))
            .group_by(Item.length, Item.kind)
        )
    )
    placed = {
        (ln, kd): (n, target)
        for ln, kd, n, target in session.execute(
            select(Item.length, Item.kind, func.count(), func.sum(Hit.replicas))
            .join(HitPosition, HitPosition.item_id == Item.id)
            .join(Hit, Hit.id == HitPosition.hit_id)
            .where(base)
            .group_by(Item.length, Item.kind)
        )
    }
    # Its type's answers per cell: judgments, or ratings (and of those, the consistencies).
    judged = study_type_of(study).results.answers_per_cell(session, base)
    out = []
    for length in study.prefix_lengths:
        for kind in study.kinds:
            key = (length, kind)
            n_placed, target = placed.get(key, (0, 0))
            n_judged, n_consistency = judged[key]
            out.append(
                CellCollection(
                    length=length,
                    kind=kind,
                    items=made.get(key, 0),
                    placed=n_placed,
                    judgments=n_judged,
                    target=int(target or 0),
                    consistency=n_consistency,
                )
            )
    return out


def _assignment_counts(study: Study, now: datetime):
    submitted = func.sum(case((Assignment.status == AssignmentStatus.submitted, 1), else_=0))
    leased = func.sum(
        case(
            (
                and_(Assignment.status == AssignmentStatus.leased, Assignment.expires_at > now),
                1,
            ),
            else_=0,
        )
    )
    return (
        select(
            Hit.index,
            Hit.length,
            Hit.replicas,
            Hit.is_overlap,
            func.coalesce(submitted, 0).label("submitted"),
            func.coalesce(leased, 0).label("leased"),
        )
        .outerjoin(Assignment, Assignment.hit_id == Hit.id)
        .where(Hit.study_id == study.id)
        .group_by(Hit.id, Hit.index, Hit.length, Hit.replicas, Hit.is_overlap)
    )


def hit_progress(
    session: Session, study: Study, *, limit: int = 50, offset: int = 0
) -> list[HitRow]:
    """HITs in index order with their submitted assignments and live leases."""
    rows = session.execute(
        _assignment_counts(study, utcnow()).order_by(Hit.index).limit(limit).offset(offset)
    ).all()
    return [HitRow(*(int(v) if not isinstance(v, bool) else v for v in r)) for r in rows]


def hit_summary(session: Session, study: Study) -> HitSummary:
    sub = _assignment_counts(study, utcnow()).subquery()
    replicas, submitted, leased = sub.c.replicas, sub.c.submitted, sub.c.leased
    row = session.execute(
        select(
            func.count(),
            func.coalesce(func.sum(case((submitted >= replicas, 1), else_=0)), 0),
            func.coalesce(func.sum(case((or_(submitted > 0, leased > 0), 1), else_=0)), 0),
            func.coalesce(func.sum(replicas), 0),
            func.coalesce(func.sum(submitted), 0),
            func.coalesce(func.sum(leased), 0),
        )
    ).one()
    return HitSummary(*(int(v) for v in row))


@dataclass(frozen=True)
class StudyProgress:
    items: int
    items_planned: int
    judgments: int
    target: int


def studies_progress(session: Session, studies: list[Study]) -> dict[int, StudyProgress]:
    """Items made / planned and judgments / target for each study of the list."""
    ids = [s.id for s in studies]
    if not ids:
        return {}
    not_att = and_(Item.study_id.in_(ids), Item.is_attention.is_(False))
    items = dict(
        session.execute(
            select(Item.study_id, func.count())
            .where(not_att, Item.skip_reason.is_(None))
            .group_by(Item.study_id)
        ).all()
    )
    targets = dict(
        session.execute(
            select(Item.study_id, func.sum(Hit.replicas))
            .join(HitPosition, HitPosition.item_id == Item.id)
            .join(Hit, Hit.id == HitPosition.hit_id)
            .where(not_att)
            .group_by(Item.study_id)
        ).all()
    )
    judged = dict(
        session.execute(
            select(Item.study_id, func.count(Judgment.id))
            .join(Judgment, Judgment.item_id == Item.id)
            .where(not_att)
            .group_by(Item.study_id)
        ).all()
    )
    return {
        s.id: StudyProgress(
            items=int(items.get(s.id, 0)),
            items_planned=s.items_per_cell * len(s.prefix_lengths) * len(s.kinds),
            judgments=int(judged.get(s.id, 0)),
            target=int(targets.get(s.id) or 0),
        )
        for s in studies
    }


@dataclass(frozen=True)
class ItemView:
    """An item as the researcher sees it: what annotators see and what they do not."""

    item: Item
    hit_index: int | None
    screen: list[str] | None  # the words in the order annotators see them

    @property
    def top1(self) -> str | None:
        return self.item.choices[0]["word"] if self.item.choices else None

    @property
    def true_in_choices(self) -> bool:
        return any(c.get("word") == self.item.true_next_word for c in self.item.choices)


def browse_items(
    session: Session,
    study: Study,
    *,
    length: int | None = None,
    kind: str | None = None,
    attention: bool | None = None,
    page: int = 1,
    per_page: int = 25,
) -> tuple[list[ItemView], int]:
    """A page of the study's items (with their HIT and screen order) and the total count."""
    where: list[Any] = [Item.study_id == study.id]
    if length is not None:
        where.append(Item.length == length)
    if kind:
        where.append(Item.kind == kind)
    if attention is not None:
        where.append(Item.is_attention.is_(attention))
    total = session.scalar(select(func.count()).select_from(Item).where(*where)) or 0
    rows = session.execute(
        select(Item, Hit.index, HitPosition.choice_order)
        .outerjoin(HitPosition, HitPosition.item_id == Item.id)
        .outerjoin(Hit, Hit.id == HitPosition.hit_id)
        .where(*where)
        .order_by(Item.length, Item.is_attention, Item.kind, Item.index)
        .limit(per_page)
        .offset((max(page, 1) - 1) * per_page)
    ).all()
    views = []
    for item, hit_index, order in rows:
        screen = None
        if order is not None:
            screen = [item.choices[r]["word"] if r != "none" else "(none)" for r in order]
        views.append(ItemView(item, hit_index, screen))
    return views, total


@dataclass(frozen=True)
class AnnotatorRow:
    annotator: Annotator
    submitted: int
    leased: int
    judgments: int


def annotator_rows(session: Session, study: Study) -> list[AnnotatorRow]:
    """The study's annotators with their submitted HITs, live leases and judgments."""
    now = utcnow()
    counts = {
        aid: (int(sub or 0), int(live or 0))
        for aid, sub, live in session.execute(
            select(
                Assignment.annotator_id,
                func.sum(case((Assignment.status == AssignmentStatus.submitted, 1), else_=0)),
                func.sum(
                    case(
                        (
                            and_(
                                Assignment.status == AssignmentStatus.leased,
                                Assignment.expires_at > now,
                            ),
                            1,
                        ),
                        else_=0,
                    )
                ),
            )
            .join(Annotator, Annotator.id == Assignment.annotator_id)
            .where(Annotator.study_id == study.id)
            .group_by(Assignment.annotator_id)
        )
    }
    judged = dict(
        session.execute(
            select(Assignment.annotator_id, func.count(Judgment.id))
            .join(Judgment, Judgment.assignment_id == Assignment.id)
            .join(Annotator, Annotator.id == Assignment.annotator_id)
            .where(Annotator.study_id == study.id)
            .group_by(Assignment.annotator_id)
        ).all()
    )
    annotators = session.scalars(
        select(Annotator).where(Annotator.study_id == study.id).order_by(Annotator.id)
    ).all()
    return [
        AnnotatorRow(a, *counts.get(a.id, (0, 0)), judgments=int(judged.get(a.id, 0)))
        for a in annotators
    ]


@dataclass(frozen=True)
class StudyPeople:
    owner: User | None  # None: made without one (`ebc study create` without --owner)
    members: list[tuple[User, str]]  # (user, role), by username


def study_people(session: Session, study: Study) -> StudyPeople:
    """Who may see the study besides administrators: its owner and its members."""
    owner = session.get(User, study.created_by_id) if study.created_by_id is not None else None
    members = session.execute(
        select(User, StudyMember.role)
        .join(StudyMember, StudyMember.user_id == User.id)
        .where(StudyMember.study_id == study.id)
        .order_by(User.username)
    ).all()
    return StudyPeople(owner, [(user, role) for user, role in members])
