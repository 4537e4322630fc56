"""Constraints that protect the data reject duplicates on both databases."""

from datetime import timedelta

import pytest
from sqlalchemy.exc import IntegrityError

from app.models import (
    Annotator,
    Assignment,
    Channel,
    Hit,
    HitPosition,
    Item,
    Judgment,
    Study,
    User,
    utcnow,
)
from app.studies.schemas import DatasetSection, ModelSection, StudyConfig
from app.studies.service import create_study


def make_study(session, slug="s1") -> Study:
    cfg = StudyConfig(
        slug=slug,
        title="t",
        model=ModelSection(name="m"),
        dataset=DatasetSection(path="d.txt"),
        prefix_lengths=[10],
        items_per_cell=2,
    )
    return create_study(session, cfg)


def make_item(session, study, index, kind="data") -> Item:
    item = Item(
        study_id=study.id,
        length=10,
        kind=kind,
        index=index,
        words="a b c d e f g h i j",
        choices=[
            {"word": w, "prob": p}
            for w, p in zip("vwxyz", (0.3, 0.2, 0.1, 0.05, 0.01), strict=True)
        ],
        provenance={"seed": 1},
    )
    session.add(item)
    session.flush()
    return item


@pytest.fixture
def world(session):
    study = make_study(session)
    hit = Hit(study_id=study.id, index=0, length=10)
    annotator = Annotator(study_id=study.id, channel=Channel.local, label="a")
    session.add_all([hit, annotator])
    session.flush()
    item = make_item(session, study, 0)
    pos = HitPosition(hit_id=hit.id, position=0, item_id=item.id, choice_order=[4, 2, 0, 1, 3])
    session.add(pos)
    session.flush()
    return study, hit, annotator, item, pos


def _rejects(session, *rows) -> None:
    with pytest.raises(IntegrityError), session.begin_nested():
        session.add_all(rows)
        session.flush()


def _assignment(hit, annotator, public_id) -> Assignment:
    return Assignment(
        public_id=public_id,
        hit_id=hit.id,
        annotator_id=annotator.id,
        expires_at=utcnow() + timedelta(minutes=30),
    )


def test_one_judgment_per_assignment_and_position(session, world):
    _study, hit, annotator, item, _pos = world
    a = _assignment(hit, annotator, "p1")
    session.add(a)
    session.flush()
    row = dict(assignment_id=a.id, position=0, item_id=item.id, option=2, chosen_rank=0, d=0.0)
    session.add(Judgment(**row))
    session.flush()
    _rejects(session, Judgment(**{**row, "option": 3, "chosen_rank": 1, "d": 1.0}))


def test_an_item_is_in_one_hit_only(session, world):
    study, _hit, _annotator, item, _pos = world
    other = Hit(study_id=study.id, index=1, length=10)
    session.add(other)
    session.flush()
    _rejects(session, HitPosition(hit_id=other.id, position=0, item_id=item.id, choice_order=[0]))


def test_an_annotator_at_most_once_per_hit(session, world):
    _study, hit, annotator, _item, _pos = world
    session.add(_assignment(hit, annotator, "p1"))
    session.flush()
    _rejects(session, _assignment(hit, annotator, "p2"))


def test_one_item_per_position_and_per_cell_index(session, world):
    study, hit, _annotator, _item, _pos = world
    second = make_item(session, study, 1)
    _rejects(session, HitPosition(hit_id=hit.id, position=0, item_id=second.id, choice_order=[0]))
    with pytest.raises(IntegrityError), session.begin_nested():
        make_item(session, study, 1)  # same (study, length, kind, index)
    make_item(session, study, 1, kind="model")  # another kind is another cell


def test_unique_names_and_external_ids(session, world):
    study, _hit, _annotator, _item, _pos = world
    session.add(User(username="u", password_hash="x"))
    session.flush()
    _rejects(session, User(username="u", password_hash="y"))
    session.add(Annotator(study_id=study.id, channel=Channel.mturk, external_id="W1"))
    session.flush()
    _rejects(session, Annotator(study_id=study.id, channel=Channel.mturk, external_id="W1"))
    # Local annotators without an external id are not collapsed into one.
    session.add_all([Annotator(study_id=study.id, channel=Channel.local) for _ in range(2)])
    session.flush()


def test_foreign_keys_are_enforced(session):
    # SQLite ignores foreign keys unless told otherwise; our engine turns them on.
    _rejects(session, Hit(study_id=987654, index=0, length=10))


def test_timestamps_come_back_aware_utc(session, world):
    study, *_ = world
    session.expire_all()
    fresh = session.get(Study, study.id)
    assert fresh.created_at.tzinfo is not None
    assert abs((utcnow() - fresh.created_at).total_seconds()) < 60
