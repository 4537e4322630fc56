"""The `ebc` command line. Each command owns its transaction."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy import select
from sqlalchemy.orm import Session

from app import __version__
from app.config import Settings

cli = typer.Typer(help="ebc-judge: exposure bias of language models, judged by people.")
db_cli = typer.Typer(help="Database schema (Alembic migrations).")
admin_cli = typer.Typer(help="Researcher accounts and API tokens.")
study_cli = typer.Typer(help="Studies.")
cli.add_typer(db_cli, name="db")
cli.add_typer(admin_cli, name="admin")
cli.add_typer(study_cli, name="study")


def _settings() -> Settings:
    try:
        return Settings()
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        _fail(f"configuration error: {exc}")


def _fail(message: str, code: int = 1):
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


@contextmanager
def _session(settings: Settings) -> Iterator[Session]:
    from app.db import build_engine, make_sessionmaker

    engine = build_engine(settings)
    try:
        with make_sessionmaker(engine)() as session, session.begin():
            yield session
    finally:
        engine.dispose()


def _migrate(settings: Settings, revision: str = "head") -> None:
    from app.db import build_engine
    from app.migrate import upgrade

    engine = build_engine(settings)
    try:
        with engine.begin() as conn:
            upgrade(conn, revision)
    finally:
        engine.dispose()


@cli.command()
def version() -> None:
    """Print the service version."""
    typer.echo(f"ebc-judge {__version__}")


@db_cli.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Migrate the database to REVISION (default: the latest)."""
    settings = _settings()
    _migrate(settings, revision)
    typer.echo(f"database at {revision}: {_redacted(settings.database_url)}")


@db_cli.command("downgrade")
def db_downgrade(revision: str) -> None:
    """Migrate the database down to REVISION ('base' empties it)."""
    from app.db import build_engine
    from app.migrate import downgrade

    engine = build_engine(_settings())
    try:
        with engine.begin() as conn:
            downgrade(conn, revision)
    finally:
        engine.dispose()
    typer.echo(f"database at {revision}")


@db_cli.command("current")
def db_current() -> None:
    """Print the database's revision and the latest one."""
    from app.db import build_engine
    from app.migrate import current_revisions, head_revisions

    engine = build_engine(_settings())
    try:
        with engine.connect() as conn:
            current = current_revisions(conn)
    finally:
        engine.dispose()
    typer.echo(f"current: {', '.join(sorted(current)) or '(empty)'}")
    typer.echo(f"head:    {', '.join(sorted(head_revisions()))}")


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    workers: Annotated[int, typer.Option(help="web processes")] = 1,
    migrate: Annotated[bool, typer.Option(help="migrate the database first")] = True,
) -> None:
    """Migrate the database, then serve the web app with uvicorn."""
    import uvicorn

    settings = _settings()
    if migrate:
        _migrate(settings)
    typer.echo(f"serving on http://{host}:{port}  (database: {_redacted(settings.database_url)})")
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=settings.log_level,
        proxy_headers=True,
    )


@cli.command()
def worker() -> None:
    """Run the precompute worker (not built yet: see the worker issue)."""
    _fail("the precompute worker is not implemented yet (worker issue #3)", code=2)


@admin_cli.command("create-user")
def create_user(
    username: str,
    password: Annotated[
        str | None, typer.Option(help="omit to be prompted; '-' reads it from standard input")
    ] = None,
    admin: Annotated[bool, typer.Option("--admin", help="may manage users and tokens")] = False,
) -> None:
    """Create a researcher account."""
    from app.auth.service import AuthError
    from app.auth.service import create_user as _create

    password = _read_password(password)
    settings = _settings()
    try:
        with _session(settings) as session:
            _create(session, username, password, is_admin=admin)
    except AuthError as exc:
        _fail(str(exc))
    typer.echo(f"created user {username}{' (admin)' if admin else ''}")


@admin_cli.command("set-password")
def set_password(
    username: str,
    password: Annotated[str | None, typer.Option(help="'-' reads it from standard input")] = None,
) -> None:
    """Set a researcher's password."""
    from app.auth.service import AuthError
    from app.auth.service import set_password as _set
    from app.models import User

    password = _read_password(password)
    try:
        with _session(_settings()) as session:
            user = session.scalar(select(User).where(User.username == username))
            if user is None:
                _fail(f"no user {username!r}")
            _set(session, user, password)
    except AuthError as exc:
        _fail(str(exc))
    typer.echo(f"password set for {username}")


@admin_cli.command("create-token")
def create_token(
    username: str, name: Annotated[str, typer.Option(help="what the token is for")] = "cli"
) -> None:
    """Create an API token for USERNAME; it is printed once."""
    from app.auth.service import create_api_token
    from app.models import User

    with _session(_settings()) as session:
        user = session.scalar(select(User).where(User.username == username))
        if user is None:
            _fail(f"no user {username!r}")
        new = create_api_token(session, user, name)
    typer.echo(new.secret)


@admin_cli.command("revoke-token")
def revoke_token(prefix: Annotated[str, typer.Argument(help="the token's first 12 characters")]):
    """Revoke the API token that starts with PREFIX."""
    from app.auth.service import revoke_api_token
    from app.models import ApiToken

    with _session(_settings()) as session:
        tokens = session.scalars(select(ApiToken).where(ApiToken.prefix == prefix[:12])).all()
        if len(tokens) != 1:
            _fail(f"{len(tokens)} tokens start with {prefix!r}; give the 12-character prefix")
        revoke_api_token(session, tokens[0])
    typer.echo(f"revoked {prefix[:12]}…")


@study_cli.command("create")
def study_create(
    config: Annotated[Path, typer.Option("--config", "-c", help="study file (TOML)")],
) -> None:
    """Create a study from a study file."""
    from app.studies.service import StudyError, create_study, load_config

    try:
        cfg = load_config(config)
        with _session(_settings()) as session:
            study = create_study(session, cfg)
            slug = study.slug
    except StudyError as exc:
        _fail(str(exc))
    typer.echo(f"created study {slug}")


@study_cli.command("list")
def study_list() -> None:
    """List the studies."""
    from app.studies.service import list_studies

    with _session(_settings()) as session:
        for s in list_studies(session):
            lengths = ",".join(map(str, s.prefix_lengths))
            typer.echo(f"{s.slug}\t{s.status.value}\t{s.task.value}\tl={lengths}\t{s.title}")


@cli.command()
def demo(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8000,
    serve_: Annotated[bool, typer.Option("--serve/--no-serve", help="start the web app")] = True,
) -> None:
    """Set up the embedded demo (SQLite): migrate, seed a study and an admin, serve."""
    from app.demo import seed_demo

    settings = _settings()
    _migrate(settings)
    with _session(settings) as session:
        seeded = seed_demo(session, settings)
    typer.echo("")
    typer.echo(f"  demo study:  {seeded.study_slug}")
    typer.echo(f"  dashboard:   http://{host}:{port}/dashboard")
    typer.echo(f"  admin login: {seeded.username} / {seeded.password}")
    typer.echo("")
    if serve_:
        serve(host=host, port=port, workers=1, migrate=False)


def _read_password(password: str | None) -> str:
    if password == "-":
        return sys.stdin.readline().rstrip("\n")
    if password is None:
        return typer.prompt("password", hide_input=True, confirmation_prompt=True)
    return password


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def main() -> None:
    cli()
