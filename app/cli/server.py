"""`ebc version` and `ebc serve`; `background_server` for a command that needs the web app
for a while (the demo's simulated crowd goes through it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def background_server(settings, host: str = "127.0.0.1") -> Iterator[str]:
    """The web app served by uvicorn in a thread of this process, on a free port of `host`,
    for the length of the block; yields its base URL. Stopped (and its engine disposed) on
    leaving the block."""
    import threading
    import time

    import uvicorn

    from app.main import create_app

    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host=host, port=0, log_level="warning")
    )
    thread = threading.Thread(target=server.run, name="background-server", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"the web app did not start on {host}")
        time.sleep(0.02)
    try:
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
