"""The suite's own fixtures (tests/conftest.py): a PostgreSQL copy handed to the next test is
what a fresh copy of the template is, and one whose schema a test changed is not reused."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from app.models import User
from tests.conftest import PG_ADMIN_URL, Copies

pytestmark = pytest.mark.postgres


def _exists(name: str) -> bool:
    admin = create_engine(PG_ADMIN_URL, poolclass=NullPool)
    try:
        with admin.connect() as conn:
            found = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name})
            return found.first() is not None
    finally:
        admin.dispose()


def test_a_reused_copy_is_empty_with_its_sequences_restarted_and_no_one_connected(
    backend, db_template, tmp_path
):
    copies = Copies(backend, db_template, tmp_path)
    try:
        with copies.copy(tmp_path) as first:
            engine = create_engine(first.url, poolclass=NullPool)
            with engine.begin() as conn:
                conn.execute(
                    User.__table__.insert(),
                    [{"username": f"u{i}", "password_hash": "-"} for i in range(3)],
                )
                with pytest.raises(Exception, match="duplicate key"), conn.begin_nested():
                    conn.execute(User.__table__.insert(), {"username": "u0", "password_hash": "-"})
            left_open = engine.connect()  # a connection the test forgot
            left_open.execute(text("SELECT 1"))
        with copies.copy(tmp_path) as second:
            assert second.url == first.url  # the same database, handed on
            with pytest.raises(Exception, match="terminat"):
                left_open.execute(text("SELECT 1"))
            engine = create_engine(second.url, poolclass=NullPool)
            with engine.begin() as conn:
                assert conn.scalar(select(func.count()).select_from(User)) == 0
                assert conn.scalar(text("SHOW synchronous_commit")) == "off"
                pages = conn.scalar(text("SELECT pg_relation_size('users')"))
                assert pages == 0  # new, empty files, as the template's
                new = conn.execute(
                    User.__table__.insert().returning(User.id),
                    {"username": "v", "password_hash": "-"},
                )
                assert new.scalar_one() == 1  # the sequence starts again
            engine.dispose()
        assert Copies._schema_of(second) == copies._schema
    finally:
        copies.close()
    assert not _exists(make_url(first.url).database)  # dropped at the end of the run


@pytest.mark.parametrize(
    "change",
    [
        "CREATE TABLE scratch (n INTEGER)",
        "ALTER TABLE users ADD COLUMN extra TEXT",
        "CREATE INDEX users_extra ON users (is_admin)",
        "UPDATE alembic_version SET version_num = '0001'",
        "CREATE SCHEMA other",
    ],
)
def test_a_copy_whose_schema_changed_is_dropped_not_reused(backend, db_template, tmp_path, change):
    copies = Copies(backend, db_template, tmp_path)
    try:
        with copies.copy(tmp_path) as changed:
            engine = create_engine(changed.url, poolclass=NullPool)
            with engine.begin() as conn:
                conn.execute(text(change))
            engine.dispose()
        assert not _exists(make_url(changed.url).database)
        with copies.copy(tmp_path) as fresh:
            assert fresh.url != changed.url
            assert Copies._schema_of(fresh) == copies._schema
    finally:
        copies.close()
