"""Engines and sessions. Nothing here connects at import time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings


def build_engine(settings: Settings, *, web: bool = False, **kwargs) -> Engine:
    """Build the engine for `settings.database_url`.

    SQLite runs in WAL mode with foreign keys enforced and a busy timeout, so a
    web process and a worker can share the file. PostgreSQL uses psycopg 3, with a
    connect timeout and TCP keepalives, so a stalled network or server fails a
    request in bounded time instead of freezing it. `web`: the engine of a web
    process, whose statements are also limited (`settings.db_statement_timeout`);
    the worker's long jobs, the CLI and migrations have no such limit.
    """
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
            kwargs.setdefault("pool_timeout", settings.db_pool_timeout)
        engine = create_engine(url, connect_args={"timeout": 30}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        # pysqlite's own transaction handling defers BEGIN; emit it ourselves so
        # SERIALIZABLE semantics (and BEGIN IMMEDIATE where asked) hold.
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    kwargs.setdefault("pool_size", settings.db_pool_size)
    kwargs.setdefault("pool_timeout", settings.db_pool_timeout)
    # Recycling beats a pre-ping round trip on every checkout of the hot path.
    kwargs.setdefault("pool_recycle", 1800)
    connect_args = postgres_connect_args(settings, url, web=web) | kwargs.pop("connect_args", {})
    return create_engine(url, connect_args=connect_args, **kwargs)


def postgres_connect_args(settings: Settings, url, *, web: bool) -> dict:
    """libpq parameters: connect timeout, keepalives (an idle connection whose peer went
    silent is dropped within about `db_tcp_timeout`), tcp_user_timeout (the same for
    unacknowledged data) and, for web processes, statement_timeout."""
    tcp = settings.db_tcp_timeout
    args: dict = {
        "connect_timeout": settings.db_connect_timeout,
        "keepalives": 1,
        "keepalives_idle": tcp // 3,
        "keepalives_interval": max(1, tcp // 9),
        "keepalives_count": 3,
        "tcp_user_timeout": tcp * 1000,
    }
    if web and settings.db_statement_timeout > 0:
        ms = round(settings.db_statement_timeout * 1000)
        options = url.query.get("options")
        options = " ".join(options) if isinstance(options, tuple) else options
        args["options"] = f"{options or ''} -c statement_timeout={ms}".strip()
    return args


def _sqlite_begin(conn) -> None:
    immediate = conn.get_execution_options().get(SQLITE_IMMEDIATE)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


SQLITE_IMMEDIATE = "ebc_sqlite_immediate"


def begin_write(session: Session) -> None:
    """Start `session`'s transaction as a writer on SQLite (BEGIN IMMEDIATE).

    SQLite cannot upgrade a reader to a writer once another writer committed
    (SQLITE_BUSY without waiting), so a read-then-write transaction that must
    be serialised takes the write lock first. A no-op on PostgreSQL (row locks
    serialise there), on a session already in a transaction, and on a session
    bound to a connection (tests).
    """
    bind = session.get_bind()
    if isinstance(bind, Engine) and bind.dialect.name == "sqlite" and not session.in_transaction():
        session.connection(execution_options={SQLITE_IMMEDIATE: True})


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    dbapi_conn.isolation_level = None  # let the "begin" listener own BEGIN
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def make_sessionmaker(bind, **kwargs) -> sessionmaker[Session]:
    return sessionmaker(bind=bind, expire_on_commit=False, **kwargs)


@contextmanager
def unit_of_work(make_session: Callable[[], Session]) -> Iterator[Session]:
    """One transaction: the one way anything here commits (requests, annotator routes, the
    CLI, the worker, streamed downloads). Services only flush; this commits on success,
    rolls back on any exception (a client disconnect included) and always closes."""
    session = make_session()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
