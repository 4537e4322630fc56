"""`ebc results STUDY`: the API's results in the terminal; `ebc results diagnostics STUDY`:
the diagnostics table (CGD per prefix kind from people and a reference model)."""

from __future__ import annotations

from typing import Annotated

import click
import typer
from typer.core import TyperGroup

FORMATS = ("table", "csv", "json", "latex")
DIAGNOSTICS_FORMATS = ("table", "csv", "json")


class _ResultsGroup(TyperGroup):
    """`ebc results STUDY ...` stays what it was: a first argument that names no subcommand
    is the study of the (hidden) `show` command. A study called `diagnostics` is
    `ebc results show diagnostics`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] != "--help":
            args = ["show", *args]
        return super().parse_args(ctx, args)


results_cli = typer.Typer(
    cls=_ResultsGroup,
    no_args_is_help=True,
    help="A study's results: `ebc results STUDY` (options: `ebc results show --help`); "
    "its diagnostics: `ebc results diagnostics STUDY`.",
)


def register(cli: typer.Typer) -> None:
    cli.add_typer(results_cli, name="results")


Estimator = Annotated[str, typer.Option(help="single | plurality")]
Unit = Annotated[str, typer.Option(help="annotator | twoway | hit | item")]
B = Annotated[int, typer.Option("--b", help="bootstrap resamples")]
Ci = Annotated[str, typer.Option(help="wild (default) | percentile | bca")]
Seed = Annotated[int, typer.Option(help="seed of every resampling")]
Exclusions = Annotated[str, typer.Option(help="on | off (the main variant)")]


def _query(**options):
    from pydantic import ValidationError

    from app.cli.common import fail
    from app.results.schemas import ResultQuery
    from app.studies.service import format_validation_error

    try:
        return ResultQuery(**options)
    except ValidationError as exc:
        fail(format_validation_error(exc))


@results_cli.command("show", hidden=True)
def results(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    format_: Annotated[
        str, typer.Option("--format", "-f", help="table | csv | json | latex")
    ] = "table",
    estimator: Estimator = "single",
    unit: Unit = "annotator",
    b: B = 10_000,
    ci: Ci = "wild",
    seed: Seed = 0,
    exclusions: Exclusions = "on",
) -> None:
    """Print a study's results: CGD, EB-C with error bars and tests, with and without the
    pre-declared exclusions (the same figures as GET /api/v1/studies/{slug}/results)."""
    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.results import exports
    from app.results.catalog import task_label
    from app.results.service import study_results

    if format_ not in FORMATS:
        fail(f"unknown format {format_!r}: use {', '.join(FORMATS)}")
    query = _query(estimator=estimator, unit=unit, b=b, ci=ci, seed=seed, exclusions=exclusions)
    with session_scope(load_settings()) as session:
        found = study_named(session, study)
        res = study_results(session, found, query)
        label = task_label(found)
    if format_ == "json":
        typer.echo(res.model_dump_json(indent=2))
    elif format_ == "csv":
        typer.echo(exports.results_csv(res), nl=False)
    elif format_ == "latex":
        typer.echo(exports.results_latex(res, label), nl=False)
    else:
        typer.echo(exports.results_table(res), nl=False)


@results_cli.command("diagnostics")
def diagnostics(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    format_: Annotated[str, typer.Option("--format", "-f", help="table | csv | json")] = "table",
    estimator: Estimator = "single",
    unit: Unit = "annotator",
    b: B = 10_000,
    ci: Ci = "wild",
    seed: Seed = 0,
    exclusions: Exclusions = "on",
) -> None:
    """Print a study's diagnostics: CGD per prefix kind and length from people and from the
    reference model, with the self-recovery gaps (the same table as
    GET /api/v1/studies/{slug}/results/diagnostics)."""
    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.results.diagnostics import diagnostics_csv, diagnostics_table, study_diagnostics

    if format_ not in DIAGNOSTICS_FORMATS:
        fail(f"unknown format {format_!r}: use {', '.join(DIAGNOSTICS_FORMATS)}")
    query = _query(estimator=estimator, unit=unit, b=b, ci=ci, seed=seed, exclusions=exclusions)
    with session_scope(load_settings()) as session:
        diag = study_diagnostics(session, study_named(session, study), query)
    if format_ == "json":
        typer.echo(diag.model_dump_json(indent=2))
    elif format_ == "csv":
        typer.echo(diagnostics_csv(diag), nl=False)
    else:
        typer.echo(diagnostics_table(diag), nl=False)
