"""`ebc results STUDY`: the API's results in the terminal (a ratings study's: its Table 3 of
quality and consistency ratings); `ebc results diagnostics STUDY`:
the diagnostics table (CGD per prefix kind from people and a reference model); `ebc results
score STUDY`: a ratings study's EB-M scores computed and stored (a results job), `ebc results
ebm STUDY`: the stored ones."""

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
    "its diagnostics: `ebc results diagnostics STUDY`; a ratings study's EB-M: `ebc results "
    "score STUDY` (compute and store), `ebc results ebm STUDY` (show).",
)


def register(cli: typer.Typer) -> None:
    cli.add_typer(results_cli, name="results")


# The next-word options default to None (the service's defaults) so that a ratings study,
# which has none of them, can refuse one that was given rather than ignore it.
Estimator = Annotated[
    str | None, typer.Option(help="single (default) | plurality; next-word studies")
]
Unit = Annotated[
    str | None,
    typer.Option(
        help="auto (default: the design decides) | annotator | twoway | hit | item; "
        "next-word studies"
    ),
]
B = Annotated[int, typer.Option("--b", help="bootstrap resamples")]
Ci = Annotated[
    str | None, typer.Option(help="wild (default) | percentile | bca; next-word studies")
]
Seed = Annotated[int, typer.Option(help="seed of every resampling")]
Exclusions = Annotated[str, typer.Option(help="on | off (the main variant)")]


def _query(**options):
    from pydantic import ValidationError

    from app.cli.common import fail
    from app.results.schemas import ResultQuery
    from app.studies.service import format_validation_error

    try:
        return ResultQuery(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as exc:
        fail(format_validation_error(exc))


@results_cli.command("show", hidden=True)
def results(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    format_: Annotated[
        str, typer.Option("--format", "-f", help="table | csv | json | latex")
    ] = "table",
    estimator: Estimator = None,
    unit: Unit = None,
    b: B = 10_000,
    ci: Ci = None,
    seed: Seed = 0,
    exclusions: Exclusions = "on",
    paper: Annotated[
        bool, typer.Option("--paper", help="latex: the paper-comparable mean +- std")
    ] = False,
) -> None:
    """Print a study's results: CGD, EB-C with error bars and tests, with and without the
    pre-declared exclusions (the same figures as GET /api/v1/studies/{slug}/results). A
    ratings study's: its Table 3 (quality and consistency after data and model prefixes,
    gap and ratio with intervals; csv and latex as ratings_table.csv and .tex; the
    next-word options --estimator, --unit and --ci are refused there)."""
    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.results.exports import task_label
    from app.results.service import study_results
    from app.studytypes.base import OptionNotForThisType
    from app.studytypes.registry import study_type_of

    if format_ not in FORMATS:
        fail(f"unknown format {format_!r}: use {', '.join(FORMATS)}")
    query = _query(estimator=estimator, unit=unit, b=b, ci=ci, seed=seed, exclusions=exclusions)
    with session_scope(load_settings()) as session:
        found = study_named(session, study)
        plugin = study_type_of(found)
        try:
            res = study_results(session, found, query)
        except OptionNotForThisType as exc:
            fail(f"{study} is {plugin.noun} study: {exc.message}")
        label = task_label(found)
    if format_ == "json":
        typer.echo(res.model_dump_json(indent=2))
    else:
        typer.echo(plugin.results.text(res, format_, label, paper=paper), nl=False)


@results_cli.command("diagnostics")
def diagnostics(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    format_: Annotated[str, typer.Option("--format", "-f", help="table | csv | json")] = "table",
    estimator: Estimator = None,
    unit: Unit = None,
    b: B = 10_000,
    ci: Ci = None,
    seed: Seed = 0,
    exclusions: Exclusions = "on",
) -> None:
    """Print a study's diagnostics: CGD per prefix kind and length from people and from the
    reference model, with the corruption ratios and EB-C_gap (the same table as
    GET /api/v1/studies/{slug}/results/diagnostics; next-word studies)."""
    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.studytypes.registry import study_type_of

    if format_ not in DIAGNOSTICS_FORMATS:
        fail(f"unknown format {format_!r}: use {', '.join(DIAGNOSTICS_FORMATS)}")
    query = _query(estimator=estimator, unit=unit, b=b, ci=ci, seed=seed, exclusions=exclusions)
    with session_scope(load_settings()) as session:
        found = study_named(session, study)
        table = study_type_of(found).diagnostics
        if table is None:
            fail(study_type_of(found).refusal(found, "diagnostics"))
        diag = table.compute(session, found, query)
    if format_ == "json":
        typer.echo(diag.model_dump_json(indent=2))
    else:
        typer.echo(table.text(diag, format_), nl=False)


EBM_FORMATS = ("table", "csv", "json", "latex")
EbmFormat = Annotated[str, typer.Option("--format", "-f", help="table | csv | json | latex")]


def _print_ebm(plugin, slug: str, stored, label: str, format_: str) -> None:
    if format_ == "json":
        typer.echo(stored.model_dump_json(indent=2) if stored else "null")
    else:
        typer.echo(plugin.scores.text(slug, stored, label, format_), nl=False)


@results_cli.command("score")
def score(
    study: Annotated[str, typer.Argument(help="the study's slug (a ratings study)")],
    b: Annotated[int, typer.Option("--b", help="bootstrap resamples over prompts")] = 1000,
    seed: Seed = 0,
    format_: EbmFormat = "table",
) -> None:
    """Compute a ratings study's EB-M scores (BLEU, NIST, METEOR, backward-BLEU, n-gram
    entropy, EB-bleu) from its continuations and the dataset, store them as its current
    scores, and print them. The worker runs this when a ratings study's precompute ends."""
    from app.audit.service import CLI
    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.results.exports import task_label
    from app.studytypes.registry import study_type_of

    if format_ not in EBM_FORMATS:
        fail(f"unknown format {format_!r}: use {', '.join(EBM_FORMATS)}")
    with session_scope(load_settings()) as session:
        found = study_named(session, study)
        plugin = study_type_of(found)
        if plugin.scores is None:
            fail(plugin.refusal(found, "EB-M"))
        try:
            plugin.scores.score(session, found, b=b, seed=seed, by=CLI)
        except plugin.scores.error as exc:
            fail(str(exc))
        stored, label = plugin.scores.stored(session, found), task_label(found)
    _print_ebm(plugin, study, stored, label, format_)


@results_cli.command("ebm")
def ebm(
    study: Annotated[str, typer.Argument(help="the study's slug (a ratings study)")],
    format_: EbmFormat = "table",
) -> None:
    """Print a ratings study's stored EB-M scores (as the last `ebc results score` or the
    worker computed them; the same as the `ebm` of GET /api/v1/studies/{slug}/results)."""
    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.results.exports import task_label
    from app.studytypes.registry import study_type_of

    if format_ not in EBM_FORMATS:
        fail(f"unknown format {format_!r}: use {', '.join(EBM_FORMATS)}")
    with session_scope(load_settings()) as session:
        found = study_named(session, study)
        plugin = study_type_of(found)
        if plugin.scores is None:
            fail(plugin.refusal(found, "EB-M"))
        stored, label = plugin.scores.stored(session, found), task_label(found)
    _print_ebm(plugin, study, stored, label, format_)


PLAN_FORMATS = ("table", "json")


# The planner's ranges, as GET /plan's query parameters take them: (low, high) open or
# closed at each end.
PLAN_RANGES = {
    "target-ebc": (1.0, 3.0, "(1, 3]"),
    "halfwidth": (0.0, 1.0, "(0, 1]"),
    "power": (0.05, 1.0, "(0.05, 1)"),
    "alpha": (0.0, 0.5, "(0, 0.5)"),
}


def _in_range(name: str, value: float) -> bool:
    low, high, text = PLAN_RANGES[name]
    return low < value and (value <= high if text.endswith("]") else value < high)


@results_cli.command("plan")
def plan(
    study: Annotated[str, typer.Argument(help="the study's slug (a next-word study)")],
    target_ebc: Annotated[
        float | None, typer.Option(help="the EB-C to detect, in (1, 3] (default 1.02)")
    ] = None,
    halfwidth: Annotated[
        float | None,
        typer.Option(help="plan an interval of this half-width, in (0, 1], instead of a test"),
    ] = None,
    power: Annotated[
        float | None, typer.Option(help="power of the test, in (0.05, 1) (default 0.8)")
    ] = None,
    alpha: Annotated[
        float | None, typer.Option(help="two-sided level, in (0, 0.5) (default 0.05)")
    ] = None,
    seed: Seed = 0,
    format_: Annotated[str, typer.Option("--format", "-f", help="table | json")] = "table",
) -> None:
    """Print the power and budget planner's plan for a study (design effect measured on its
    judgments so far) and what each crowd channel charges for it, by that platform's own
    fee rule (the same as GET /api/v1/studies/{slug}/plan)."""
    import dataclasses

    from pydantic import TypeAdapter

    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.results.schemas import PricedPlan
    from app.results.stats import PlanError, PlanTarget
    from app.simulate.costs import priced_plan
    from app.studytypes.registry import study_type_of

    if format_ not in PLAN_FORMATS:
        fail(f"unknown format {format_!r}: use {', '.join(PLAN_FORMATS)}")
    given = {"target_ebc": target_ebc, "halfwidth": halfwidth, "power": power, "alpha": alpha}
    for key, value in given.items():
        name = key.replace("_", "-")
        if value is not None and not _in_range(name, value):
            fail(f"--{name} must be in {PLAN_RANGES[name][2]}, not {value:g}")
    target = dataclasses.replace(PlanTarget(), **{k: v for k, v in given.items() if v is not None})
    settings = load_settings()
    with session_scope(settings) as session:
        found = study_named(session, study)
        plugin = study_type_of(found)
        if plugin.planner is None:
            fail(plugin.refusal(found, "planner"))
        try:
            made = plugin.planner.plan(session, found, target, seed=seed)
            priced = priced_plan(found, settings, made)
        except PlanError as exc:
            fail(f"no study reaches this target: {exc.reason}")
    if format_ == "json":
        typer.echo(TypeAdapter(PricedPlan).dump_json(priced, indent=2).decode())
    else:
        typer.echo("\n".join(plan_lines(priced)))


def plan_lines(p) -> list[str]:
    """A priced plan (`app.results.schemas.PricedPlan`) as the terminal shows it."""
    from app.simulate.preview import usd

    aim = (
        f"an EB-C interval of half-width {p.halfwidth:g}"
        if p.halfwidth is not None
        else f"EB-C {p.target_ebc:g} against 1 at power {p.power_target:g}, alpha {p.alpha:g}"
    )
    cgd_from = "measured" if p.cgd_data_measured else "the paper's"
    lines = [
        f"plan for {aim}",
        f"  assumes CGD(data) {p.cgd_data:.3f} ({cgd_from}), design effect "
        f"{p.design_effect:.2f} ({'measured' if p.design_effect_measured else 'assumed'})",
        f"  judgments per cell {p.judgments_per_cell:,} (now {p.judgments_per_cell_now:,}); "
        f"HITs {p.hits:,}, assignments {p.assignments:,}, judgments {p.judgments:,}, "
        f"annotators at least {p.annotators_needed:,}",
        "cost per channel (each platform's fee rule; no platform asked):",
    ]
    for c in p.channel_costs:
        where = f"{c.channel} ({c.environment})" + ("" if c.enabled else ", channel off")
        if c.total_cents is None:
            lines.append(f"  {where}: {c.problem}")
        else:
            lines.append(
                f"  {where}: {c.assignments:,} assignments, rewards {usd(c.rewards_cents)} + "
                f"fees {usd(c.fees_cents)} = {usd(c.total_cents)}"
            )
        lines.append(f"    fee rule: {c.fee_rule}")
        lines += [f"    {note}" for note in c.notes]
    return lines
