"""`ebc hits build` and `ebc annotators invite`, run as a user runs them."""

import csv

from sqlalchemy import select

from app.annotation.identities import read_invite_token
from app.db import build_engine, make_sessionmaker
from app.models import Annotator, Hit, Study, StudyStatus
from tests.hits.factory import make_study
from tests.test_cli import ebc


def test_build_then_invite(migrated_copy, tmp_path):
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as s, s.begin():
        make_study(s, slug="cli", per_cell=12, build=False).status = StudyStatus.ready
    out = ebc("hits", "build", "cli", db=migrated_copy).stdout
    assert "cli: 4 HITs built" in out and "leftover items: data 2, model 2" in out
    csv_path = tmp_path / "links.csv"
    out = ebc(
        "annotators", "invite", "cli", "--count", "3", "--csv", str(csv_path), db=migrated_copy
    )
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == 3 and all("/a/" in r["link"] for r in rows)
    token = rows[0]["link"].rsplit("/a/", 1)[1]
    # The link carries the annotator's nonce only (no id): it names one invited annotator.
    nonce = read_invite_token(migrated_copy.settings().secret_key, token).nonce
    with make_sessionmaker(engine)() as s:
        assert s.scalar(select(Annotator.label).where(Annotator.invite_nonce == nonce))
        assert len(s.scalars(select(Hit)).all()) == 4
        assert s.scalar(select(Study.status)) is StudyStatus.collecting
    assert ebc("hits", "build", "nope", db=migrated_copy, check=False).returncode == 1
    engine.dispose()
