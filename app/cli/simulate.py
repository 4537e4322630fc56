"""`ebc simulate STUDY`: simulate before you pay (issue 14).

A simulated crowd does the study as designed (lengths, items per cell, HIT mix,
attention items, replicas, overlap, cap, cell share, exclusions) R times against a
stand-in P_D with a known EB-C; the table says what the results would recover, how
often their interval covers the truth, the power to detect the target EB-C, and what
each crowd channel charges for the design (`app.simulate.preview`, as the study page).
"""

from __future__ import annotations

from typing import Annotated

import typer

CROWD_HELP = (
    "sampler | oracle, optionally with layers: noisy:SHARE (random clicks), position:SHARE "
    "(first screen slot), fast:SHARE (random and too fast), spammers:SHARE (of annotators); "
    "e.g. sampler,noisy:0.2"
)


def register(cli: typer.Typer) -> None:
    cli.command("simulate")(simulate)


def simulate(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    crowd: Annotated[str, typer.Option(help=CROWD_HELP)] = "sampler",
    true_ebc: Annotated[
        float | None,
        typer.Option(help="population EB-C of the stand-in P_D (default: the target's)"),
    ] = None,
    cgd_data: Annotated[float, typer.Option(help="population CGD(data) of the stand-in")] = 0.73,
    target_ebc: Annotated[
        float | None,
        typer.Option(help="the EB-C the study should detect (default: the planner's, 1.02)"),
    ] = None,
    replications: Annotated[int, typer.Option(help="simulated studies", min=1)] = 200,
    seed: Annotated[int, typer.Option(help="seed of the crowd and of every resampling")] = 0,
    b: Annotated[int, typer.Option("--b", help="wild bootstrap draws", min=100)] = 10_000,
    provider: Annotated[
        str | None,
        typer.Option(help="price one channel: mturk | prolific | local (default: all three)"),
    ] = None,
) -> None:
    """Simulate the study R times with a known truth: the recovered EB-C ± SE, the
    coverage of the default 95% interval, the power to detect the target EB-C, and what
    each crowd channel charges for the design (the service behind the study page)."""
    from pydantic import ValidationError

    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.simulate.preview import CHANNELS, PreviewError, PreviewOptions, simulate_before_paying

    if provider is not None and provider not in CHANNELS:
        fail(f"unknown provider {provider!r}: one of {', '.join(CHANNELS)}")
    try:
        chosen = {"target_ebc": target_ebc} if target_ebc is not None else {}
        options = PreviewOptions(
            **chosen,
            crowd=crowd,
            true_ebc=true_ebc,
            cgd_data=cgd_data,
            replications=replications,
            seed=seed,
            b=b,
            providers=CHANNELS if provider is None else (provider,),
        )
    except ValidationError as exc:
        fail("; ".join(f"--{'-'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
    settings = load_settings()
    with session_scope(settings) as session:
        found = study_named(session, study)
        try:
            preview = simulate_before_paying(found, settings, options)
        except PreviewError as exc:
            fail(exc.message)
    typer.echo(render(preview), nl=False)


def render(preview) -> str:
    """The table of `ebc simulate` (plain text)."""
    summary, size, design = preview.summary, preview.size, preview.design
    reject = preview.rejection
    lines = [
        f"SIMULATED crowd ({summary.crowd}), {summary.replications} replications of this "
        f"study's design: {len(design.lengths)} lengths x {design.hits_per_length} HITs, "
        f"{size.assignments} assignments, {size.judgments:,} judgments, cap {design.cap} HITs "
        "per annotator",
        f"stand-in P_D: population CGD(data) {_fmt(summary.cgd_data)}, true EB-C "
        f"{_fmt(summary.true_ebc)}; per study on average {summary.mean_judgments:,.0f} "
        f"judgments, {summary.mean_annotators:.0f} annotators (effective "
        f"{summary.mean_effective:.1f}), {summary.mean_excluded:.0f} judgments excluded",
        f"interval: the results' default {summary.level:.0%} (wild cluster by annotator); "
        f"{reject}: share rejecting EB-C = 1 at alpha {summary.alpha:g}"
        + (f" (target EB-C {preview.options.target_ebc:g})" if reject == "power" else ""),
        "",
        f"{'variant':<20} {'l':>4} {'truth':>7} {'mean est':>9} {'sd est':>7} {'mean SE':>8} "
        f"{'coverage':>15} {reject:>15}",
    ]
    for x in summary.rows:
        lines.append(
            f"{x.variant:<20} {x.length:>4} {x.truth:>7.4f} {x.mean_estimate:>9.4f} "
            f"{x.sd_estimate:>7.4f} {x.mean_se:>8.4f} "
            f"{x.coverage:>8.3f} ± {x.coverage_mc:.3f} {x.reject:>8.3f} ± {x.reject_mc:.3f}"
        )
    for variant, share in summary.pooled_reject.items():
        lines.append(f"pooled over lengths, {variant}: {reject} {share:.3f}")
    lines.append("(± : Monte Carlo standard error over the replications)")
    one = [r for r in preview.rows if r.variant == "with exclusions"]
    lines.append(
        "one simulated study (replication 1, with exclusions): "
        + "; ".join(
            f"l={r.length} {r.estimate:.4f} ± {r.se:.4f} (truth {r.truth:.4g})" for r in one
        )
    )
    lines.append("")
    lines += cost_lines(preview.costs)
    lines.append(f"{summary.seconds_per_replication * 1000:.0f} ms per replication")
    return "\n".join(lines) + "\n"


def cost_lines(costs) -> list[str]:
    """What each channel charges for the design, by its own fee rules (no platform asked)."""
    lines = ["cost of this design per channel (each platform's fee rules; no platform asked):"]
    for c in costs:
        where = f"{c.provider} ({c.environment})" + ("" if c.enabled else ", channel off")
        if c.estimate is None:
            lines.append(f"  {where}: {c.problem}")
            continue
        e = c.estimate
        lines.append(
            f"  {where}: {c.assignments} assignments, rewards {_usd(e.rewards_cents)} + fees "
            f"{_usd(e.fees_cents)} = {_usd(e.total_cents)}"
        )
        lines += [f"    {note}" for note in c.notes]
    return lines


def _usd(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def _fmt(values: dict[int, float]) -> str:
    distinct = {round(v, 6) for v in values.values()}
    if len(distinct) == 1:
        return f"{next(iter(values.values())):.4g}"
    return ", ".join(f"l={ln}: {v:.4g}" for ln, v in values.items())
