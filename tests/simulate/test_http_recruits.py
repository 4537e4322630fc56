"""Simulated annotators made by two runs at once (two `ebc simulate-http` on one study):
their labels stay apart. PostgreSQL only: SQLite serialises the two runs' writers (each
recruits under BEGIN IMMEDIATE), so neither can count before the other commits."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.db import build_engine, make_sessionmaker
from app.models import Annotator, Study
from app.simulate.http import simulated_annotator
from tests.hits.factory import make_study


@pytest.mark.postgres
def test_two_runs_recruiting_at_once_label_their_annotators_apart(backend, migrated_copy):
    engine = build_engine(migrated_copy.settings())
    try:
        sm = make_sessionmaker(engine)
        with sm() as session, session.begin():
            study_id = make_study(session, slug="h", lengths=(10,), per_cell=10).id
        # Both transactions recruit before either commits (read committed: neither sees
        # the other's annotator).
        with sm() as one, sm() as two:
            first = simulated_annotator(one, one.get(Study, study_id), "k" * 32)
            second = simulated_annotator(two, two.get(Study, study_id), "k" * 32)
            one.commit()
            two.commit()
        with sm() as session:
            labels = dict(
                session.execute(
                    select(Annotator.id, Annotator.label).where(Annotator.simulated.is_(True))
                ).all()
            )
        assert first.label != second.label
        assert labels == {first.annotator_id: first.label, second.annotator_id: second.label}
    finally:
        engine.dispose()
