"""`ebc simulate-http STUDY BASE_URL`: a simulated crowd through a running server (issues 14, 15).

Simulated annotators (marked simulated, labelled ``simulated-<n>``) follow invite links to
the server at BASE_URL and do HITs as people do: on a next-word study they pick words
(P_D a stand-in or the study's reference model); on a ratings study they rate each pair's
quality, then its consistency once the page reveals the context (raters with chosen true
means per kind and step): the study type's crowd (``StudyTypePlugin.http_crowd``). Their
answers are stored like anyone's. The command reads and writes the server's database
(this process's settings: the same DATABASE_URL and SECRET_KEY as the server), to make the
annotators and for the simulator's god-view.
"""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from app.cli.simulate import (
    CROWD_HELP,
    SD_HELP,
    CgdDataOption,
    ConsistencyOption,
    QualityOption,
)


def register(cli: typer.Typer) -> None:
    cli.command("simulate-http")(simulate_http)


def simulate_http(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    base_url: Annotated[str, typer.Argument(help="the running server, e.g. http://127.0.0.1:8000")],
    crowd: Annotated[
        str,
        typer.Option(
            help=CROWD_HELP + "; on a ratings study only the layers noisy, fast and spammers"
        ),
    ] = "sampler",
    judge: Annotated[
        Literal["stand-in", "reference"],
        typer.Option(
            help="P_D of a next-word study: stand-in (parametric, --true-ebc) or reference "
            "(the study's reference model, from items.reference)"
        ),
    ] = "stand-in",
    true_ebc: Annotated[
        float | None, typer.Option(help="population EB-C of the stand-in P_D (default 1)")
    ] = None,
    cgd_data: CgdDataOption = None,
    quality: QualityOption = None,
    consistency: ConsistencyOption = None,
    sd_rater: Annotated[float | None, typer.Option(help=SD_HELP["sd_rater"], min=0)] = None,
    sd_rater_kind: Annotated[
        float | None, typer.Option(help=SD_HELP["sd_rater_kind"], min=0)
    ] = None,
    sd_pair: Annotated[float | None, typer.Option(help=SD_HELP["sd_pair"], min=0)] = None,
    sd_noise: Annotated[float | None, typer.Option(help=SD_HELP["sd_noise"], min=0)] = None,
    max_hits: Annotated[
        int | None,
        typer.Option(help="assignments to submit in all (default: until no work)", min=1),
    ] = None,
    parallel: Annotated[int, typer.Option(help="annotators at work at once", min=1, max=32)] = 1,
    resend_share: Annotated[
        float, typer.Option(help="share of posts sent twice (a double click)", min=0, max=1)
    ] = 0.0,
    seed: Annotated[int, typer.Option(help="seed of the crowd")] = 0,
) -> None:
    """Let a simulated crowd do the study's HITs through the server's annotator pages: pick
    next words on a next-word study, rate continuations on a ratings study."""
    import httpx

    from app.cli.common import command_engine, fail, load_settings, session_scope, study_named
    from app.db import make_sessionmaker
    from app.simulate.crowd import Crowd, CrowdSpecError
    from app.simulate.godview import GodView, SimulationError
    from app.studytypes.registry import STUDY_TYPES

    try:
        made = Crowd.parse(crowd)
    except CrowdSpecError as exc:
        fail(str(exc))
    settings = load_settings()
    with session_scope(settings) as session:
        study_id = study_named(session, study).id
    make_session = make_sessionmaker(command_engine(settings))
    # What each type's crowd takes (the other type's options are refused by it).
    given = {
        "judge": judge,
        "true_ebc": true_ebc,
        "cgd_data": cgd_data,
        "quality": quality,
        "consistency": consistency,
        "sd_rater": sd_rater,
        "sd_rater_kind": sd_rater_kind,
        "sd_pair": sd_pair,
        "sd_noise": sd_noise,
    }
    common = {
        "seed": seed,
        "max_hits": max_hits,
        "parallel": parallel,
        "resend_share": resend_share,
    }
    try:
        view = GodView(make_session, study_id).study()
        crowd_of_type = STUDY_TYPES[view.study_type].http_crowd
        run = crowd_of_type.run_crowd(
            base_url.rstrip("/"), make_session, study_id, settings.secret_key, view, made, given,
            **common,
        )  # fmt: skip
    except (SimulationError, ValueError) as exc:
        fail(str(exc))
    except httpx.HTTPError as exc:
        fail(f"the server at {base_url} did not answer: {exc}")
    typer.echo(run.summary())
    typer.echo(crowd_of_type.done(run, study))
