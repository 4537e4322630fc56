"""Fixtures: the suite runs on SQLite and PostgreSQL (`--db=sqlite|postgres|all`).

Each backend gets a fresh database migrated with `alembic upgrade head` once
per run; each test runs inside a transaction that is rolled back at the end.
"""

from __future__ import annotations

import os
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
def fresh_database(backend: str, tmp_dir: Path) -> Iterator[FreshDatabase]:
    """An empty database of `backend`, dropped afterwards."""
    if backend == "sqlite":
        yield FreshDatabase(f"sqlite:///{tmp_dir / f'ebc-{uuid.uuid4().hex[:8]}.db'}", backend)
        return
    name = f"ebc_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
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
