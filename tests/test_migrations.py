"""The schema comes from Alembic alone, and models and migrations agree."""

from sqlalchemy import inspect

from app.db import build_engine
from app.migrate import check, current_revisions, downgrade, head_revisions, upgrade
from app.models import Base


def test_upgrade_empty_database_then_downgrade_back(empty_db):
    engine = build_engine(empty_db.settings())
    try:
        with engine.begin() as conn:
            assert current_revisions(conn) == set()
            upgrade(conn)
            assert current_revisions(conn) == head_revisions()
            tables = set(inspect(conn).get_table_names())
            assert set(Base.metadata.tables) <= tables
            check(conn)  # raises if autogenerate finds any drift
        with engine.begin() as conn:
            downgrade(conn, "base")
            assert set(inspect(conn).get_table_names()) <= {"alembic_version"}
            upgrade(conn)  # and up again: downgrade left nothing behind
            assert current_revisions(conn) == head_revisions()
    finally:
        engine.dispose()


def test_one_head_and_migrations_named_by_date_and_slug():
    from pathlib import Path

    from app.config import PACKAGE

    assert len(head_revisions()) == 1
    for path in Path(PACKAGE / "migrations" / "versions").glob("*.py"):
        assert path.name[:11].replace("_", "").isdigit(), path.name  # YYYY_MM_DD_
