"""The `ebc` command line: one module per command group, each command one unit of work
(`common.session_scope`), each verb the service the dashboard calls.

Other packages (the worker's) add commands through the `ebc.cli` entry points.
"""

from __future__ import annotations

import typer

from app.cli import results, server, simulate_http
from app.cli import simulate as simulate_cli
from app.cli.admin import admin_cli
from app.cli.common import dispose_engines
from app.cli.crowd import crowd_cli
from app.cli.database import db_cli
from app.cli.hits import annotators_cli, hits_cli
from app.cli.study import study_cli

cli = typer.Typer(help="ebc-judge: exposure bias of language models, judged by people.")
server.register(cli)
cli.add_typer(db_cli, name="db")
cli.add_typer(admin_cli, name="admin")
cli.add_typer(study_cli, name="study")
cli.add_typer(hits_cli, name="hits")
cli.add_typer(annotators_cli, name="annotators")
cli.add_typer(crowd_cli, name="crowd")
results.register(cli)
simulate_cli.register(cli)
simulate_http.register(cli)


@cli.callback()
def _command(ctx: typer.Context) -> None:
    ctx.call_on_close(dispose_engines)


_plugins_loaded = False


def load_plugins() -> None:
    """Commands from other packages (the worker's), found through entry points.

    `app` never imports `worker`; the worker registers `ebc worker` and
    `ebc precompute` under the `ebc.cli` entry-point group instead.
    """
    global _plugins_loaded
    if _plugins_loaded:
        return
    from importlib.metadata import entry_points

    for ep in entry_points(group="ebc.cli"):
        ep.load()(cli)
    _plugins_loaded = True


def main() -> None:
    load_plugins()
    cli()
