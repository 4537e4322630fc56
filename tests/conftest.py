"""Fixtures: the suite runs on SQLite and PostgreSQL (`--db=sqlite|postgres|all`).

Each backend gets a fresh database migrated with `alembic upgrade head` once
per run; each test runs inside a transaction that is rolled back at the end.
Tests that commit for real take `migrated_copy`, a copy of a database migrated once.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.migrate import upgrade


@pytest.fixture(autouse=True, scope="session")
def _cheap_password_hashing() -> Iterator[None]:
    """Argon2id at argon2-cffi's cheapest parameters (``argon2.profiles.CHEAPEST``, made for
    tests) in the test processes: the same library, hashing and verification, without the
    0.3 CPU s each hash and each login costs at the recommended parameters (the suite creates
    and logs in users in hundreds of tests).  Production's parameters are checked by
    ``tests/auth/test_service.py`` on the hash made when the module loads; processes the
    tests start (servers, the CLI) keep them."""
    from argon2 import PasswordHasher, profiles

    from app.auth import service

    production = service._hasher
    service._hasher = PasswordHasher.from_parameters(profiles.CHEAPEST)
    yield
    service._hasher = production


PG_ADMIN_URL = os.environ.get(
    "EBC_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--db",
        default="all",
        choices=("sqlite", "postgres", "all"),
        help="database backends to run the database tests on",
    )


def _backends(config: pytest.Config) -> list[str]:
    choice = config.getoption("--db")
    return ["sqlite", "postgres"] if choice == "all" else [choice]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        backends = _backends(metafunc.config)
        if metafunc.definition.get_closest_marker("postgres"):
            # Concurrency that SQLite serialises by design is tested on PostgreSQL.
            backends = [b for b in backends if b == "postgres"]
        if metafunc.definition.get_closest_marker("sqlite"):
            # Backend-independent code paths that are slow to set up run once.
            backends = [b for b in backends if b == "sqlite"]
        metafunc.parametrize("backend", backends, scope="session")


@dataclass
class FreshDatabase:
    url: str
    backend: str

    def settings(self, **overrides) -> Settings:
        return Settings(database_url=self.url, env="test", **overrides)


@contextmanager
def fresh_database(
    backend: str, tmp_dir: Path, template: FreshDatabase | None = None
) -> Iterator[FreshDatabase]:
    """An empty database of `backend` (or a copy of `template`), dropped afterwards."""
    if backend == "sqlite":
        path = tmp_dir / f"ebc-{uuid.uuid4().hex[:8]}.db"
        if template is not None:
            # SQLite's backup API: a consistent copy whatever the source's journal holds.
            source = sqlite3.connect(make_url(template.url).database)
            target = sqlite3.connect(path)
            try:
                source.backup(target)
            finally:
                target.close()
                source.close()
        yield FreshDatabase(f"sqlite:///{path}", backend)
        return
    name = f"ebc_test_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{make_url(template.url).database}"' if template is not None else ""
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"{copy}'))
        url = make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        yield FreshDatabase(url, backend)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def empty_db(backend: str, tmp_path: Path) -> Iterator[FreshDatabase]:
    """A new, unmigrated database for tests that migrate or commit for real."""
    with fresh_database(backend, tmp_path) as db:
        yield db


@pytest.fixture(scope="session")
def db_template(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FreshDatabase]:
    """A database migrated to head once per run (and xdist worker), for `migrated_copy`:
    copying costs a fraction of migrating (a file on SQLite; CREATE DATABASE ... TEMPLATE on
    PostgreSQL, which needs the template to have no connections: none is kept)."""
    with fresh_database(backend, tmp_path_factory.mktemp(f"{backend}-template")) as db:
        engine = build_engine(db.settings())
        with engine.begin() as conn:
            upgrade(conn)
        engine.dispose()
        yield db


@pytest.fixture
def migrated_copy(
    backend: str, db_template: FreshDatabase, tmp_path: Path
) -> Iterator[FreshDatabase]:
    """A new database at head for tests that commit for real (servers, subprocesses,
    threads), dropped afterwards; tests of the migrations themselves use `empty_db`."""
    with fresh_database(backend, tmp_path, template=db_template) as db:
        yield db


@pytest.fixture(scope="session")
def migrated_db(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FreshDatabase]:
    with fresh_database(backend, tmp_path_factory.mktemp(backend)) as db:
        engine = build_engine(db.settings())
        with engine.begin() as conn:
            upgrade(conn)
        engine.dispose()
        yield db


@pytest.fixture(scope="session")
def engine(migrated_db: FreshDatabase) -> Iterator[Engine]:
    engine = build_engine(migrated_db.settings())
    yield engine
    engine.dispose()


@pytest.fixture
def connection(engine: Engine) -> Iterator[Connection]:
    """A connection inside a transaction that is rolled back after the test."""
    with engine.connect() as conn:
        trans = conn.begin()
        try:
            yield conn
        finally:
            trans.rollback()


@pytest.fixture
def session(connection: Connection) -> Iterator[Session]:
    """A session whose commits become savepoints of the outer transaction."""
    with make_sessionmaker(connection, join_transaction_mode="create_savepoint")() as s:
        yield s


@pytest.fixture
def settings(migrated_db: FreshDatabase) -> Settings:
    return migrated_db.settings()


@pytest.fixture
def client(settings: Settings, connection: Connection) -> Iterator[TestClient]:
    """The app, sharing the test's transaction (so tests see what requests wrote)."""
    app = create_app(settings, bind=connection)
    with TestClient(app, base_url="http://testserver") as c:
        yield c
