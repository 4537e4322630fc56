"""Alembic environment: runs on the application's engine and models."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from app.config import Settings
from app.db import build_engine
from app.models import Base

config = context.config
target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )


def run_migrations_online() -> None:
    # Tests and the CLI hand a live connection over; otherwise use Settings.
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.attributes.get("database_url") or Settings().database_url
    engine = build_engine(Settings(database_url=url))
    try:
        with engine.connect() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
run_migrations_online()
