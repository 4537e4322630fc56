"""`ebc simulate STUDY`: simulate before you pay (issue 14).

A simulated crowd does the study as designed (lengths, items per cell, HIT mix,
attention items, replicas, overlap, cap, cell share, exclusions) R times against a
stand-in P_D with a known EB-C; the table says what the results would recover, how
often their interval covers the truth, and the power to detect the target EB-C.
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
        float | None, typer.Option(help="the EB-C the study should detect (the planner's)")
    ] = None,
    replications: Annotated[int, typer.Option(help="simulated studies", min=1)] = 200,
    seed: Annotated[int, typer.Option(help="seed of the crowd and of every resampling")] = 0,
    b: Annotated[int, typer.Option("--b", help="wild bootstrap draws", min=100)] = 10_000,
) -> None:
    """Simulate the study R times with a known truth: the recovered EB-C ± SE, the
    coverage of the default 95% interval and the power to detect the target EB-C."""
    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.results.stats import PlanTarget
    from app.simulate.crowd import Crowd, CrowdSpecError
    from app.simulate.study import Design, simulate_study

    try:
        made = Crowd.parse(crowd)
    except CrowdSpecError as exc:
        fail(str(exc))
    with session_scope(load_settings()) as session:
        found = study_named(session, study)
        try:
            design = Design.from_study(found)
            design.check()
        except ValueError as exc:
            fail(f"study {study!r}: {exc}")
        reward, fee = int(found.reward_cents), float(found.platform_fee)
    target = PlanTarget() if target_ebc is None else PlanTarget(target_ebc=target_ebc)
    try:
        summary = simulate_study(
            design,
            made,
            true_ebc=true_ebc,
            cgd_data=cgd_data,
            replications=replications,
            seed=seed,
            b=b,
            target=target,
        )
    except ValueError as exc:
        fail(str(exc))
    typer.echo(render(summary, design, target.target_ebc, reward, fee), nl=False)


def _assignments(design) -> int:
    """Assignments the design asks for (HIT replica slots), as build_hits lays them out."""
    per_length = design.hits_per_length
    overlap = round(design.overlap_share * per_length)
    wide = max(design.overlap_replicas, design.replicas)
    return len(design.lengths) * ((per_length - overlap) * design.replicas + overlap * wide)


def render(summary, design, target_ebc: float, reward_cents: int, platform_fee: float) -> str:
    """The table of `ebc simulate` (plain text)."""
    truth_is_target = all(abs(x - target_ebc) < 1e-12 for x in summary.true_ebc.values())
    null = all(abs(x - 1.0) < 1e-12 for x in summary.true_ebc.values())
    reject = "power" if truth_is_target else ("size" if null else "rejects EB-C=1")
    lines = [
        f"SIMULATED crowd ({summary.crowd}), {summary.replications} replications of this "
        f"study's design: {len(design.lengths)} lengths x {design.hits_per_length} HITs, "
        f"{_assignments(design)} assignments, cap {design.cap} HITs per annotator",
        f"stand-in P_D: population CGD(data) {_fmt(summary.cgd_data)}, true EB-C "
        f"{_fmt(summary.true_ebc)}; per study on average {summary.mean_judgments:,.0f} "
        f"judgments, {summary.mean_annotators:.0f} annotators (effective "
        f"{summary.mean_effective:.1f}), {summary.mean_excluded:.0f} judgments excluded",
        f"interval: the results' default {summary.level:.0%} (wild cluster by annotator); "
        f"{reject}: share rejecting EB-C = 1 at alpha {summary.alpha:g}"
        + (f" (target EB-C {target_ebc:g})" if truth_is_target else ""),
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
    if reward_cents:
        n = _assignments(design)
        total = round(n * reward_cents * (1 + platform_fee))
        lines.append(
            f"cost as the study is set: {n} assignments x ${reward_cents / 100:.2f} x "
            f"(1 + fee {platform_fee:g}) = ${total / 100:,.2f} (the channel's own estimate, "
            "with its fee tiers: `ebc crowd publish` shows it before asking)"
        )
    lines.append(f"{summary.seconds_per_replication * 1000:.0f} ms per replication")
    return "\n".join(lines) + "\n"


def _fmt(values: dict[int, float]) -> str:
    distinct = {round(v, 6) for v in values.values()}
    if len(distinct) == 1:
        return f"{next(iter(values.values())):.4g}"
    return ", ".join(f"l={ln}: {v:.4g}" for ln, v in values.items())
