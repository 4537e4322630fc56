"""A ratings study whose ratings were given through the ratings service, as the annotator
page gives them (`app.studytypes.ratings.annotation.rate`: each pair's quality, then its
consistency), for the ratings results' tests.

The study (`tests.hits.ratings_factory.make_ratings_study`): prefix lengths 10 and 20, 10
data and 10 model pairs per length, HITs of 5 + 5 pairs and one attention pair (a
continuation of shuffled words), 3 ratings per pair: 4 HITs, 12 assignments. Six annotators
take them two each, round by round:

- ``steady``, ``lenient``, ``harsh``: attentive raters (attention pairs rated 0.5) whose
  ratings depend on the pair's kind and their leniency: quality 3.5 after data prefixes,
  3.0 after model prefixes, plus 0 / +0.5 / -0.5, plus the pair's own 0 or 0.5 (by its
  id); consistency 0.5 below the quality after model prefixes, the same after data ones.
  ``steady``'s first pair of each HIT is rated in 0.2 s (too fast: the study's minimum
  is 1 s).
- ``careless``: rates every pair 4, attention pairs included (fails the attention rule).
- ``blocked``: an attentive rater, blocked after the work with its past excluded.
- ``sim``: an attentive rater marked simulated (a simulated crowd's annotator), when
  ``simulated``.

Every rating posted is kept in `RatedStudy.posted` with what the results need to compute a
figure by hand. One data pair of length 10 has a continuation that a spreadsheet would run
as a formula (`FORMULA`), and the model's name needs LaTeX escapes (`MODEL_NAME`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.annotation.admin import block
from app.annotation.leases import next_assignment
from app.models import Annotator, HitPosition, Item, Study, utcnow
from app.studytypes.ratings.annotation import CONSISTENCY, QUALITY, RatingPost, rate
from tests.hits.factory import annotator
from tests.hits.ratings_factory import make_ratings_study

FORMULA = "=HYPERLINK(evil) river stone"
MODEL_NAME = "lab_model#1&co"
LENIENCY = {"steady": 0.0, "lenient": 0.5, "harsh": -0.5, "blocked": 0.0, "sim": 0.0}
FAST_MS, SLOW_MS = 200, 4000


@dataclass(frozen=True)
class Posted:
    annotator: str
    item_id: int
    length: int
    kind: str
    attention: bool
    quality: float
    consistency: float
    too_fast: bool


@dataclass
class RatedStudy:
    study: Study
    annotators: dict[str, Annotator]
    posted: list[Posted] = field(default_factory=list)

    def mean(
        self, length: int, kind: str, step: str, *, drop: tuple[str, ...] = (), fast: bool = True
    ) -> float:
        """The mean `step` rating of a cell by hand: attention pairs and the annotators in
        `drop` left out, and the too-fast ratings unless `fast`."""
        values = [
            getattr(p, step)
            for p in self.posted
            if (p.length, p.kind) == (length, kind)
            and not p.attention
            and p.annotator not in drop
            and (fast or not p.too_fast)
        ]
        return sum(values) / len(values)


def _values(name: str, item: Item, attention: bool) -> tuple[float, float]:
    if name == "careless":
        return 4.0, 4.0
    if attention:
        return 0.5, 0.5
    quality = (3.5 if item.kind == "data" else 3.0) + LENIENCY[name] + 0.5 * (item.id % 2)
    return quality, quality - (0.5 if item.kind == "model" else 0.0)


def _point(value: float) -> str:
    return f"{value:g}"


def make_rated_study(
    session: Session, *, slug: str = "rated", simulated: bool = True
) -> RatedStudy:
    study = make_ratings_study(
        session,
        slug=slug,
        lengths=(10, 20),
        per_cell=10,
        replicas=3,
        model_name=MODEL_NAME,
    )
    names = ["steady", "lenient", "harsh", "careless", "blocked"] + (["sim"] if simulated else [])
    made = RatedStudy(study, {n: annotator(session, study, n, simulated=n == "sim") for n in names})
    formula_set = False
    now = utcnow()
    for _ in range(2):
        for name in names:
            who = made.annotators[name]
            work = next_assignment(session, who, now=now, serve=True)
            lease = work.assignment
            if lease is None:
                continue
            rows = session.execute(
                select(HitPosition.position, Item)
                .join(Item, Item.id == HitPosition.item_id)
                .where(HitPosition.hit_id == lease.hit_id)
                .order_by(HitPosition.position)
            ).all()
            for position, item in rows:
                if not formula_set and item.kind == "data" and item.length == 10:
                    item.continuation = FORMULA  # before anyone sees it
                    formula_set = True
                    session.flush()
                attention = item.is_attention
                quality, consistency = _values(name, item, attention)
                ms = FAST_MS if name == "steady" and position == 0 else SLOW_MS
                for step, value in ((QUALITY, quality), (CONSISTENCY, consistency)):
                    post = RatingPost(lease.public_id, position, step, _point(value), ms)
                    rate(session, who, post, now=now)
                made.posted.append(
                    Posted(
                        name, item.id, item.length, item.kind, attention, quality, consistency,
                        ms < 1000,
                    )
                )  # fmt: skip
    block(session, made.annotators["blocked"], reason="tests", exclude_past=True)
    session.flush()
    return made
