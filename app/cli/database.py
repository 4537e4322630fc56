"""`ebc db`: the database schema (Alembic migrations)."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.common import command_engine, load_settings, migrate_database, redacted

db_cli = typer.Typer(help="Database schema (Alembic migrations).")


@db_cli.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Migrate the database to REVISION (default: the latest)."""
    settings = load_settings()
    migrate_database(settings, revision)
    typer.echo(f"database at {revision}: {redacted(settings.database_url)}")


@db_cli.command("downgrade")
def db_downgrade(revision: str) -> None:
    """Migrate the database down to REVISION ('base' empties it)."""
    from app.migrate import downgrade

    with command_engine(load_settings()).begin() as conn:
        downgrade(conn, revision)
    typer.echo(f"database at {revision}")


@db_cli.command("current")
def db_current() -> None:
    """Print the database's revision and the latest one."""
    from app.migrate import current_revisions, head_revisions

    with command_engine(load_settings()).connect() as conn:
        current = current_revisions(conn)
    typer.echo(f"current: {', '.join(sorted(current)) or '(empty)'}")
    typer.echo(f"head:    {', '.join(sorted(head_revisions()))}")
