"""What every `ebc` command shares: settings, failing with a message, and its unit of work."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import build_engine, make_sessionmaker, unit_of_work

_engines: dict[str, Engine] = {}


def load_settings() -> Settings:
    try:
        return Settings()
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        fail(f"configuration error: {exc}")


def fail(message: str, code: int = 1):
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def command_engine(settings: Settings) -> Engine:
    """The running command's engine: built on first use and disposed when the command ends
    (`dispose_engines`, which the `ebc` group runs on close), so a command with many
    transactions (a progress bar's) does not build one for each."""
    engine = _engines.get(settings.database_url)
    if engine is None:
        engine = _engines[settings.database_url] = build_engine(settings)
    return engine


def dispose_engines() -> None:
    while _engines:
        _engines.popitem()[1].dispose()


@contextmanager
def session_scope(settings: Settings) -> Iterator[Session]:
    """One transaction of the running command (`app.db.unit_of_work`)."""
    with unit_of_work(make_sessionmaker(command_engine(settings))) as session:
        yield session


def migrate_database(settings: Settings, revision: str = "head") -> None:
    from app.migrate import upgrade

    # Its own engine, disposed at once: `ebc serve` keeps nothing open while it serves.
    engine = build_engine(settings)
    try:
        with engine.begin() as conn:
            upgrade(conn, revision)
    finally:
        engine.dispose()


def user_named(session: Session, username: str):
    from app.auth.service import user_by_name

    user = user_by_name(session, username)
    if user is None:
        fail(f"no user {username!r}")
    return user


def study_named(session: Session, slug: str):
    from app.studies.service import get_study

    found = get_study(session, slug)
    if found is None:
        fail(f"no study {slug!r}")
    return found


def read_password(password: str | None) -> str:
    if password == "-":
        return sys.stdin.readline().rstrip("\n")
    if password is None:
        return typer.prompt("password", hide_input=True, confirmation_prompt=True)
    return password


def redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
