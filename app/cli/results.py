"""`ebc results STUDY`: the API's results in the terminal."""

from __future__ import annotations

from typing import Annotated

import typer

FORMATS = ("table", "csv", "json", "latex")


def register(cli: typer.Typer) -> None:
    cli.command("results")(results)


def results(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    format_: Annotated[
        str, typer.Option("--format", "-f", help="table | csv | json | latex")
    ] = "table",
    estimator: Annotated[str, typer.Option(help="single | plurality")] = "single",
    unit: Annotated[str, typer.Option(help="annotator | twoway | hit | item")] = "annotator",
    b: Annotated[int, typer.Option("--b", help="bootstrap resamples")] = 10_000,
    ci: Annotated[str, typer.Option(help="wild (default) | percentile | bca")] = "wild",
    seed: Annotated[int, typer.Option(help="seed of every resampling")] = 0,
    exclusions: Annotated[str, typer.Option(help="on | off (the main variant)")] = "on",
) -> None:
    """Print a study's results: CGD, EB-C with error bars and tests, with and without the
    pre-declared exclusions (the same figures as GET /api/v1/studies/{slug}/results)."""
    from pydantic import ValidationError

    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.results import exports
    from app.results.catalog import task_label
    from app.results.schemas import ResultQuery
    from app.results.service import study_results
    from app.studies.service import format_validation_error

    if format_ not in FORMATS:
        fail(f"unknown format {format_!r}: use {', '.join(FORMATS)}")
    try:
        query = ResultQuery(
            estimator=estimator, unit=unit, b=b, ci=ci, seed=seed, exclusions=exclusions
        )
    except ValidationError as exc:
        fail(format_validation_error(exc))
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
