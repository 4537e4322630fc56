"""Fixtures: the suite runs on SQLite and PostgreSQL (`--db=sqlite|postgres|all`).

Each backend gets a fresh database migrated with `alembic upgrade head` once
per run; each test runs inside a transaction that is rolled back at the end.
Tests that commit for real take `migrated_copy`, a copy of a database migrated once
(on PostgreSQL a copy emptied after its test and handed to the next one: see `Copies`).
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

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


# The files that take longest, slowest first (seconds on the 2-core machine at load 2-3,
# 2026-11-28).  `--dist loadfile` hands files out by their number of tests, most first, so
# these one- and two-test files came last and one worker ran them while the other waited.
SLOW_FILES = (
    "tests/worker/test_getting_started.py",  # 80: the getting-started page's commands
    "tests/web/test_dashboard_results_screenshots.py",  # 41: 450,000 judgments in a browser
    "tests/worker/test_demo_command.py",  # 30: `ebc demo` end to end
    "tests/web/test_schemathesis.py",  # 28: the API against its document
    "tests/worker/test_runner.py",  # 25: worker processes, killed and rescued
    "tests/crowd/test_import.py",
    "tests/web/test_dashboard_crowd.py",
    "tests/web/test_authorization_matrix.py",
    "tests/web/test_api_ratings.py",
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadfile`, the slowest files handed out first (then xdist's order: most tests
    first), so the run does not end on one worker with a long file left."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    rank = {path: i for i, path in enumerate(SLOW_FILES)}

    class SlowFirst(LoadFileScheduling):
        _ordered = False

        def _assign_work_unit(self, node) -> None:
            if not self._ordered:  # the first call: the queue holds every file
                self._ordered = True
                queue = sorted(self.workqueue.items(), key=lambda kv: rank.get(kv[0], len(rank)))
                self.workqueue.clear()
                self.workqueue.update(queue)  # a stable sort: the rest keep xdist's order
            super()._assign_work_unit(node)

    return SlowFirst(config, log)


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


class Databases:
    """The run's databases of each backend, made when first asked for and dropped when the
    run ends: the migrated template, the rolled-back tests' database and its engine, the
    pool of copies.

    Not pytest's own session fixtures: `backend` is a session-scoped parameter, and pytest
    tears a session fixture down whenever the parameter changes.  Under `-n 2 --dist
    loadfile` a worker runs a file's SQLite tests, then its PostgreSQL ones, then the next
    file's SQLite ones: so it migrated, copied and dropped databases of both backends again
    for every file (about a hundred files run on both).  The `backend`-scoped fixtures below
    only look their database up here."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory):
        self._tmp = tmp_path_factory
        self._stack = ExitStack()
        self._made: dict[tuple[str, str], object] = {}

    def _get(self, what: str, backend: str, make):
        key = (what, backend)
        if key not in self._made:
            self._made[key] = make()
        return self._made[key]

    def template(self, backend: str) -> FreshDatabase:
        """Migrated to head once per run (and xdist worker), for copies: copying costs a
        fraction of migrating (a file on SQLite; CREATE DATABASE ... TEMPLATE on PostgreSQL,
        which needs the template to have no connections: none is kept)."""

        def make() -> FreshDatabase:
            tmp = self._tmp.mktemp(f"{backend}-template")
            db = self._stack.enter_context(fresh_database(backend, tmp))
            engine = build_engine(db.settings())
            with engine.begin() as conn:
                upgrade(conn)
            engine.dispose()
            return db

        return self._get("template", backend, make)

    def migrated(self, backend: str) -> FreshDatabase:
        """The rolled-back tests' database: a copy of the template."""
        template = self.template(backend)
        return self._get(
            "migrated",
            backend,
            lambda: self._stack.enter_context(
                fresh_database(backend, self._tmp.mktemp(backend), template=template)
            ),
        )

    def engine(self, backend: str) -> Engine:
        def make() -> Engine:
            engine = build_engine(self.migrated(backend).settings())
            self._stack.callback(engine.dispose)
            return engine

        return self._get("engine", backend, make)

    def copies(self, backend: str) -> Copies:
        def make() -> Copies:
            pool = Copies(backend, self.template(backend), self._tmp.mktemp(f"{backend}-copies"))
            self._stack.callback(pool.close)
            return pool

        return self._get("copies", backend, make)

    def close(self) -> None:
        self._stack.close()


@pytest.fixture(scope="session")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Databases]:
    made = Databases(tmp_path_factory)
    yield made
    made.close()


@pytest.fixture(scope="session")
def db_template(backend: str, databases: Databases) -> FreshDatabase:
    """A database migrated to head once per run, for `migrated_copy` (see Databases)."""
    return databases.template(backend)


# What a copy's schema is made of: every object, column, constraint, index, type, function,
# trigger, schema and extension, the database's own settings and the migration it is at.  A
# copy whose test changed any of these is dropped rather than reused.
_SCHEMA_OF_A_COPY = """
SELECT md5(string_agg(x, E'\\n' ORDER BY x)) FROM (
  SELECT 'r ' || n.nspname || '.' || c.relname || ' ' || c.relkind::text || ' '
         || coalesce(array_to_string(c.reloptions, ','), '')
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
     AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%'
  UNION ALL
  SELECT 'a ' || a.attrelid::regclass || ' ' || a.attname || ' '
         || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' '
         || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'k ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace = 'public'::regnamespace
  UNION ALL SELECT 'i ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
  UNION ALL
  SELECT 't ' || typname || ' ' || typtype::text FROM pg_type
   WHERE typnamespace = 'public'::regnamespace
  UNION ALL
  SELECT 'e ' || enumtypid::regtype || ' ' || enumlabel || ' ' || enumsortorder FROM pg_enum
  UNION ALL
  SELECT 'p ' || oid::regprocedure || ' ' || md5(prosrc) FROM pg_proc
   WHERE pronamespace = 'public'::regnamespace
  UNION ALL
  SELECT 'g ' || tgrelid::regclass || ' ' || tgname || ' ' || tgenabled::text FROM pg_trigger
   WHERE NOT tgisinternal
  UNION ALL SELECT 'n ' || nspname FROM pg_namespace
  UNION ALL SELECT 'x ' || extname || ' ' || extversion FROM pg_extension
  UNION ALL
  SELECT 's ' || array_to_string(setconfig, ',') FROM pg_db_role_setting
   WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL SELECT 'l ' || count(*) FROM pg_largeobject_metadata
  UNION ALL SELECT 'v ' || version_num FROM alembic_version
) AS schema(x)
"""

# What a test wrote: the tables with a page on disk (an empty table of a fresh copy has none,
# and any row written, even one rolled back, leaves one) and the sequences ever used.
_WRITTEN_TABLES = """
SELECT quote_ident(relname) FROM pg_class
 WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p')
   AND relname <> 'alembic_version' AND pg_relation_size(oid) > 0
"""
_USED_SEQUENCES = """
SELECT quote_ident(schemaname) || '.' || quote_ident(sequencename) FROM pg_sequences
 WHERE last_value IS NOT NULL
"""


class Copies:
    """Copies of the migrated template for `migrated_copy`.

    SQLite: a new file a test (the backup API; it costs little).  PostgreSQL: a new database
    costs about 1-2 s to copy and 1-2 s to drop (DROP DATABASE waits for a checkpoint) — most
    of the time of the tests that commit for real.  So a copy is used by one test at a time
    and, after it, brought back to what a fresh copy is: its other connections ended, every
    table the test wrote truncated (new, empty files, as the template's; CASCADE takes the
    empty tables that refer to them too), every sequence it
    used restarted.  A copy whose schema the test changed (a migration run, a table made) is
    dropped instead.  The copies left are dropped at the end of the run."""

    def __init__(self, backend: str, template: FreshDatabase, tmp_dir: Path):
        self.backend, self.template, self.tmp_dir = backend, template, tmp_dir
        self._free: list[FreshDatabase] = []
        self._stack = ExitStack()
        self._schema: str | None = None

    @contextmanager
    def copy(self, tmp_path: Path) -> Iterator[FreshDatabase]:
        if self.backend == "sqlite":
            with fresh_database(self.backend, tmp_path, template=self.template) as db:
                yield db
            return
        db = self._free.pop() if self._free else self._new()
        try:
            yield db
        finally:
            if self._reset(db):
                self._free.append(db)
            else:
                _drop_postgres(make_url(db.url).database)

    def _new(self) -> FreshDatabase:
        db = self._stack.enter_context(
            fresh_database(self.backend, self.tmp_dir, template=self.template)
        )
        # A commit need not wait for its WAL to reach the disk (only a crash of the server
        # could lose it, and none is tested): the copies' tests commit a lot on a busy disk.
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        try:
            with admin.connect() as conn:
                name = make_url(db.url).database
                conn.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit TO off'))
        finally:
            admin.dispose()
        if self._schema is None:
            self._schema = self._schema_of(db)
        return db

    @staticmethod
    def _schema_of(db: FreshDatabase) -> str:
        engine = create_engine(db.url, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                return conn.execute(text(_SCHEMA_OF_A_COPY)).scalar_one()
        finally:
            engine.dispose()

    def _reset(self, db: FreshDatabase) -> bool:
        """Empties `db` as a fresh copy is; False when it must be dropped instead."""
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        engine = create_engine(db.url, poolclass=NullPool)
        try:
            with admin.connect() as conn:
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = :name AND pid <> pg_backend_pid()"
                    ),
                    {"name": make_url(db.url).database},
                )
            with engine.begin() as conn:
                if conn.execute(text(_SCHEMA_OF_A_COPY)).scalar_one() != self._schema:
                    return False
                tables = conn.execute(text(_WRITTEN_TABLES)).scalars().all()
                if tables:
                    conn.execute(text(f"TRUNCATE {', '.join(tables)} CASCADE"))
                for sequence in conn.execute(text(_USED_SEQUENCES)).scalars().all():
                    conn.execute(text(f"ALTER SEQUENCE {sequence} RESTART"))
            return True
        except Exception:  # whatever the test left it in, a dropped copy is a clean one
            return False
        finally:
            engine.dispose()
            admin.dispose()

    def close(self) -> None:
        self._stack.close()


def _drop_postgres(name: str) -> None:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(scope="session")
def copies(backend: str, databases: Databases) -> Copies:
    return databases.copies(backend)


@pytest.fixture
def migrated_copy(copies: Copies, tmp_path: Path) -> Iterator[FreshDatabase]:
    """A database at head, as fresh, for tests that commit for real (servers, subprocesses,
    threads); tests of the migrations themselves use `empty_db`."""
    with copies.copy(tmp_path) as db:
        yield db


@pytest.fixture(scope="session")
def migrated_db(backend: str, databases: Databases) -> FreshDatabase:
    """The database the rolled-back tests share (see Databases)."""
    return databases.migrated(backend)


@pytest.fixture(scope="session")
def engine(backend: str, migrated_db: FreshDatabase, databases: Databases) -> Engine:
    return databases.engine(backend)


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
