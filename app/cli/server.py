"""`ebc version` and `ebc serve`."""

from __future__ import annotations

from typing import Annotated

import typer

from app import __version__
from app.cli.common import load_settings, migrate_database, redacted


def register(cli: typer.Typer) -> None:
    cli.command()(version)
    cli.command()(serve)


def version() -> None:
    """Print the service version."""
    typer.echo(f"ebc-judge {__version__}")


def serve(
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    workers: Annotated[int, typer.Option(help="web processes")] = 1,
    migrate: Annotated[bool, typer.Option(help="migrate the database first")] = True,
) -> None:
    """Migrate the database, then serve the web app with uvicorn."""
    import uvicorn

    settings = load_settings()
    if migrate:
        migrate_database(settings)
    typer.echo(f"serving on http://{host}:{port}  (database: {redacted(settings.database_url)})")
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=settings.log_level,
        # X-Forwarded-For is read by the app itself, from EBC_TRUSTED_PROXIES only; uvicorn's
        # own handling would trust 127.0.0.1 (or FORWARDED_ALLOW_IPS) besides.
        proxy_headers=False,
    )
