"""Engines and sessions. Nothing here connects at import time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings


def build_engine(settings: Settings, **kwargs) -> Engine:
    """Build the engine for `settings.database_url`.

    SQLite runs in WAL mode with foreign keys enforced and a busy timeout, so a
    web process and a worker can share the file. PostgreSQL uses psycopg 3.
    """
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        # pysqlite's own transaction handling defers BEGIN; emit it ourselves so
        # SERIALIZABLE semantics (and BEGIN IMMEDIATE where asked) hold.
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    kwargs.setdefault("pool_size", settings.db_pool_size)
    # Recycling beats a pre-ping round trip on every checkout of the hot path.
    kwargs.setdefault("pool_recycle", 1800)
    return create_engine(url, **kwargs)


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


def get_session(request: Request) -> Iterator[Session]:
    """One session per request; the request commits, services only flush.

    Used with `scope="function"` so the commit happens before the response is
    sent: a client never sees a success that was not stored.
    """
    session: Session = request.app.state.sessionmaker()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


SessionDep = Annotated[Session, Depends(get_session, scope="function")]
