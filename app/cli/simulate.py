"""`ebc simulate STUDY`: simulate before you pay (issues 14 and 15).

A simulated crowd does the study as designed (lengths, items per cell, HIT mix,
attention items, replicas, overlap, cap, cell share, exclusions) R times against a
stand-in P_D with a known EB-C; the table says what the results would recover, how
often their interval covers the truth, the power to detect the target EB-C, and what
each crowd channel charges for the design (as the study page). On a ratings study
simulated raters with chosen true mean quality and consistency per kind rate it instead:
the gap and ratio data/model per length and step against the truth, their coverage, the
power to find the gap, the pairs the design needs, and the same costs. Each is its study
type's preview (``StudyTypePlugin.preview``).
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
    from app.simulate.costs import channel_costs
    from app.simulate.preview import CHANNELS, NO_LIMITS, PreviewError
    from app.studytypes.registry import study_type_of

    if provider is not None and provider not in CHANNELS:
        fail(f"unknown provider {provider!r}: one of {', '.join(CHANNELS)}")
    common = {
        "crowd": crowd,
        "replications": replications,
        "seed": seed,
        "providers": CHANNELS if provider is None else (provider,),
    } | ({} if b is None else {"b": b})
    # Each type's own options: its preview's (the others do not apply to it).
    specific = {
        "target_ebc": target_ebc,
        "true_ebc": true_ebc,
        "cgd_data": cgd_data,
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
        plugin = study_type_of(found)
        fields = plugin.preview.OPTIONS.model_fields
        given = [_flag(k) for k, v in specific.items() if v is not None and k not in fields]
        if given:
            fail(f"{study} is {plugin.noun} study: {', '.join(given)} does not apply to it")
        chosen = common | {k: v for k, v in specific.items() if v is not None}
        try:
            options = _options(plugin.preview.OPTIONS, chosen)
            preview = plugin.preview.run(
                found, settings, options, limits=NO_LIMITS, price=channel_costs
            )
        except PreviewError as exc:
            fail(exc.message)
    typer.echo(plugin.preview.text(preview), nl=False)


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
