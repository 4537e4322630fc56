"""`ebc simulate STUDY`: simulate before you pay (issues 14 and 15).

A simulated crowd does the study as designed (lengths, items per cell, HIT mix,
attention items, replicas, overlap, cap, cell share, exclusions) R times against a
stand-in P_D with a known EB-C; the table says what the results would recover, how
often their interval covers the truth, the power to detect the target EB-C, and what
each crowd channel charges for the design (`app.simulate.preview`, as the study page).
On a ratings study simulated raters with chosen true mean quality and consistency per
kind rate it instead (`app.simulate.ratings_preview`): the gap and ratio data/model per
length and step against the truth, their coverage, the power to find the gap, the pairs
the design needs, and the same costs.
"""

from __future__ import annotations

from typing import Annotated

import typer

CROWD_HELP = (
    "sampler | oracle, optionally with layers: noisy:SHARE (random clicks), position:SHARE "
    "(first screen slot), fast:SHARE (random and too fast), spammers:SHARE (of annotators); "
    "e.g. sampler,noisy:0.2"
)


RATERS = "ratings studies only"

# The options `ebc simulate` and `ebc simulate-http` share.
CgdDataOption = Annotated[
    float | None, typer.Option(help="population CGD(data) of the stand-in (default 0.73)")
]
QualityOption = Annotated[
    str | None,
    typer.Option(
        help=f"true mean quality after data and after model prefixes, at every length "
        f"(default 3.4,3.1; {RATERS})",
        metavar="DATA,MODEL",
    ),
]
ConsistencyOption = Annotated[
    str | None,
    typer.Option(
        help=f"true mean consistency after data and after model prefixes (default "
        f"3.3,2.9; {RATERS})",
        metavar="DATA,MODEL",
    ),
]
SD_HELP = {
    "sd_rater": f"sd of a rater's leniency, rating points (default 0.5; {RATERS})",
    "sd_rater_kind": f"sd of the rater x kind effect (default 0.25; {RATERS})",
    "sd_pair": f"sd of how good a pair is (default 0.6; {RATERS})",
    "sd_noise": f"sd of one rating's noise (default 0.7; {RATERS})",
}
"""The raters' spreads' help (`ebc simulate-http` also refuses a negative one itself)."""


def register(cli: typer.Typer) -> None:
    cli.command("simulate")(simulate)


def simulate(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    crowd: Annotated[str, typer.Option(help=CROWD_HELP)] = "sampler",
    true_ebc: Annotated[
        float | None,
        typer.Option(help="population EB-C of the stand-in P_D (default: the target's)"),
    ] = None,
    cgd_data: CgdDataOption = None,
    target_ebc: Annotated[
        float | None,
        typer.Option(help="the EB-C the study should detect (default: the planner's, 1.02)"),
    ] = None,
    replications: Annotated[int, typer.Option(help="simulated studies", min=1)] = 200,
    seed: Annotated[int, typer.Option(help="seed of the crowd and of every resampling")] = 0,
    b: Annotated[
        int | None,
        typer.Option(
            "--b",
            help="bootstrap draws: the wild bootstrap's (default 10,000); on a ratings study "
            "the secondary annotator bootstrap's (default 2,000)",
            min=100,
        ),
    ] = None,
    provider: Annotated[
        str | None,
        typer.Option(help="price one channel: mturk | prolific | local (default: all three)"),
    ] = None,
    quality: QualityOption = None,
    consistency: ConsistencyOption = None,
    sd_rater: Annotated[float | None, typer.Option(help=SD_HELP["sd_rater"])] = None,
    sd_rater_kind: Annotated[float | None, typer.Option(help=SD_HELP["sd_rater_kind"])] = None,
    sd_pair: Annotated[float | None, typer.Option(help=SD_HELP["sd_pair"])] = None,
    sd_noise: Annotated[float | None, typer.Option(help=SD_HELP["sd_noise"])] = None,
    half_width: Annotated[
        float | None,
        typer.Option(
            help=f"the gap interval's half-width the design should reach, rating points "
            f"(default 0.1; {RATERS})"
        ),
    ] = None,
) -> None:
    """Simulate the study R times with a known truth: the recovered EB-C ± SE, the
    coverage of the default 95% interval, the power to detect the target EB-C, and what
    each crowd channel charges for the design (the service behind the study page). On a
    ratings study: simulated raters, the recovered gap and ratio data/model per length
    and step, their coverage, the power to find the gap and the pairs the design needs."""
    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.simulate.preview import (
        CHANNELS,
        PreviewError,
        PreviewOptions,
        simulate_before_paying,
    )
    from app.simulate.ratings_preview import (
        RatingsPreviewOptions,
        is_ratings,
        simulate_ratings_before_paying,
    )

    if provider is not None and provider not in CHANNELS:
        fail(f"unknown provider {provider!r}: one of {', '.join(CHANNELS)}")
    common = {
        "crowd": crowd,
        "replications": replications,
        "seed": seed,
        "providers": CHANNELS if provider is None else (provider,),
    } | ({} if b is None else {"b": b})
    nextword = {"target_ebc": target_ebc, "true_ebc": true_ebc, "cgd_data": cgd_data}
    ratings = {
        "quality": quality,
        "consistency": consistency,
        "sd_rater": sd_rater,
        "sd_rater_kind": sd_rater_kind,
        "sd_pair": sd_pair,
        "sd_noise": sd_noise,
        "half_width": half_width,
    }
    settings = load_settings()
    with session_scope(settings) as session:
        found = study_named(session, study)
        rated = is_ratings(found)
        mine, others = (ratings, nextword) if rated else (nextword, ratings)
        given = [_flag(k) for k, v in others.items() if v is not None]
        if given:
            kind = "a ratings study" if rated else "a next-word study"
            fail(f"{study} is {kind}: {', '.join(given)} does not apply to it")
        chosen = common | {k: v for k, v in mine.items() if v is not None}
        try:
            if rated:
                preview = simulate_ratings_before_paying(
                    found, settings, _options(RatingsPreviewOptions, chosen)
                )
            else:
                preview = simulate_before_paying(found, settings, _options(PreviewOptions, chosen))
        except PreviewError as exc:
            fail(exc.message)
    typer.echo((render_ratings if rated else render)(preview), nl=False)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _options(model, chosen: dict):
    """The options `model` from the command line's, or the command fails saying which."""
    from pydantic import ValidationError

    from app.cli.common import fail

    try:
        return model(**chosen)
    except ValidationError as exc:
        fail("; ".join(f"--{'-'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))


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


def render_ratings(preview) -> str:
    """The table of `ebc simulate` on a ratings study (plain text)."""
    summary, size, design, raters = preview.summary, preview.size, preview.design, preview.raters
    (qd, qm), (cd, cm) = preview.options.quality, preview.options.consistency
    mix = " + ".join(f"{n} {design.kinds[k]}" for k, n in sorted(design.mix.items()))
    lines = [
        f"SIMULATED raters ({preview.crowd}), {summary.replications} replications of this "
        f"study's design: {len(design.lengths)} lengths x {design.hits_per_length} HITs of "
        f"{mix} pairs and {design.attention} attention, {design.replicas} ratings per pair, "
        f"{size.assignments} assignments, {size.judgments:,} ratings, cap {design.cap} HITs "
        "per rater",
        f"true means on 0-{raters.scale_max} in steps of {raters.step:g}: quality {qd:g} "
        f"(data) {qm:g} (model), consistency {cd:g} (data) {cm:g} (model), at every length; "
        f"per study on average {summary.mean_ratings:,.0f} ratings, "
        f"{summary.mean_annotators:.0f} raters, {summary.mean_excluded:.0f} ratings excluded",
        f"interval: the ratings results' headline {summary.level:.0%} (two-way, rater x "
        "pair); power: share whose gap interval excludes 0 (size where the true gap is 0); "
        "boot: the secondary annotator-bootstrap interval's coverage of the true gap",
        "",
        f"{'variant':<20} {'l':>4} {'step':<11} {'true gap':>8} {'mean':>7} {'sd':>6} "
        f"{'coverage':>15} {'true ratio':>10} {'mean':>6} {'coverage':>15} "
        f"{'power/size':>15} {'half-w':>6} {'boot':>15}",
    ]
    for x in summary.rows:
        lines.append(
            f"{x.variant:<20} {x.length:>4} {x.step:<11} {x.true_gap:>8.4f} {x.mean_gap:>7.4f} "
            f"{x.sd_gap:>6.4f} {x.gap_coverage:>7.3f} ± {x.gap_coverage_mc:.3f} "
            f"{x.true_ratio:>10.4f} {x.mean_ratio:>6.4f} "
            f"{x.ratio_coverage:>7.3f} ± {x.ratio_coverage_mc:.3f} "
            f"{x.reject:>7.3f} ± {x.reject_mc:.3f} {x.half_width:>6.3f} "
            f"{x.boot_coverage:>7.3f} ± {x.boot_coverage_mc:.3f}"
        )
    lines.append("(gap: data - model, ratio: data / model, true and mean over the replications;")
    lines.append(" ± : Monte Carlo standard error over the replications)")
    one = [r for r in summary.rows if r.variant == "with exclusions"]
    lines.append(
        "one simulated study (replication 1, with exclusions): "
        + "; ".join(
            f"l={r.length} {r.step} gap {r.first_gap:.3f} [{r.first_low:.3f}, "
            f"{r.first_high:.3f}] (truth {r.true_gap:.3g})"
            for r in one
        )
    )
    lines.append("")
    if preview.needs:
        lines.append(
            f"what the design needs ({preview.needs[0].pairs_now} pairs per cell now; the "
            "simulated interval carried through the raters' variance components):"
        )
    for n in preview.needs:
        power = (
            f"{n.pairs_for_power:,} for power {n.power:g} at every length"
            if n.pairs_for_power is not None
            else "no power figure (the true gap is 0, or out of reach)"
        )
        width = (
            f"{n.pairs_for_half_width:,} pairs per cell"
            if n.pairs_for_half_width is not None
            else "more pairs per cell than it computes"
        )
        lines.append(
            f"  {n.step}: gap half-width {n.half_width_now:.3f} now; {width} for "
            f"{n.target_half_width:g}; {power}"
        )
    lines.append("")
    lines += cost_lines(preview.costs)
    lines.append(f"{summary.seconds_per_replication * 1000:.0f} ms per replication")
    return "\n".join(lines) + "\n"
