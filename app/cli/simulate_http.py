"""`ebc simulate-http STUDY BASE_URL`: a simulated crowd through a running server (issue 14).

Simulated annotators (marked simulated, labelled ``simulated-<n>``) follow invite links to
the server at BASE_URL and do HITs as people do (`app.simulate.http`); their judgments are
stored like anyone's and the results say they include a simulated crowd. The command reads
and writes the server's database (this process's settings: the same DATABASE_URL and
SECRET_KEY as the server), to make the annotators and for the simulator's god-view.
"""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from app.cli.simulate import CROWD_HELP


def register(cli: typer.Typer) -> None:
    cli.command("simulate-http")(simulate_http)


def simulate_http(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    base_url: Annotated[str, typer.Argument(help="the running server, e.g. http://127.0.0.1:8000")],
    crowd: Annotated[str, typer.Option(help=CROWD_HELP)] = "sampler",
    judge: Annotated[
        Literal["stand-in", "reference"],
        typer.Option(
            help="P_D: stand-in (parametric, --true-ebc) or reference (the study's reference "
            "model, from items.reference)"
        ),
    ] = "stand-in",
    true_ebc: Annotated[float, typer.Option(help="population EB-C of the stand-in P_D")] = 1.0,
    cgd_data: Annotated[float, typer.Option(help="population CGD(data) of the stand-in")] = 0.73,
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
    """Let a simulated crowd do the study's HITs through the server's annotator pages."""
    import httpx

    from app.cli.common import command_engine, fail, load_settings, session_scope, study_named
    from app.db import make_sessionmaker
    from app.simulate.crowd import Crowd, CrowdSpecError
    from app.simulate.http import run_http_crowd
    from app.simulate.judges import GodView, ModelJudge, SimulationError, StandInJudge

    try:
        made = Crowd.parse(crowd)
    except CrowdSpecError as exc:
        fail(str(exc))
    settings = load_settings()
    with session_scope(settings) as session:
        study_id = study_named(session, study).id
    make_session = make_sessionmaker(command_engine(settings))
    try:
        if judge == "reference":
            p_d = ModelJudge()
        else:
            view = GodView(make_session, study_id).study()
            p_d = StandInJudge.calibrated(
                view, made, true_ebc=true_ebc, cgd_data=cgd_data, seed=seed
            )
        run = run_http_crowd(
            base_url.rstrip("/"),
            make_session,
            study_id,
            settings.secret_key,
            made,
            p_d,
            seed=seed,
            max_hits=max_hits,
            parallel=parallel,
            resend_share=resend_share,
        )
    except (SimulationError, ValueError) as exc:
        fail(str(exc))
    except httpx.HTTPError as exc:
        fail(f"the server at {base_url} did not answer: {exc}")
    typer.echo(run.summary())
    typer.echo(
        f"their {len(run.answers)} judgments are stored like anyone's; the results of {study} "
        "say that they include a simulated crowd's"
    )
