"""`ebc simulate-http STUDY BASE_URL`: a simulated crowd through a running server (issues 14, 15).

Simulated annotators (marked simulated, labelled ``simulated-<n>``) follow invite links to
the server at BASE_URL and do HITs as people do: on a next-word study they pick words
(`app.simulate.http`, P_D a stand-in or the study's reference model); on a ratings study
they rate each pair's quality, then its consistency once the page reveals the context
(`app.simulate.http_ratings`, raters with chosen true means per kind and step). Their
answers are stored like anyone's. The command reads and writes the server's database
(this process's settings: the same DATABASE_URL and SECRET_KEY as the server), to make the
annotators and for the simulator's god-view.
"""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from app.cli.simulate import (
    CROWD_HELP,
    RATERS,
    SD_HELP,
    CgdDataOption,
    ConsistencyOption,
    QualityOption,
)


def register(cli: typer.Typer) -> None:
    cli.command("simulate-http")(simulate_http)


def _means(text: str | None, option: str, default: tuple[float, float]) -> tuple[float, float]:
    """``"3.4,3.1"``: the true means after data and after model prefixes."""
    from app.cli.common import fail

    if text is None:
        return default
    parts = [p.strip() for p in text.split(",")]
    try:
        data, model = (float(p) for p in parts)
    except ValueError:
        fail(f"{option} takes two numbers, the data's and the model's mean: e.g. 3.4,3.1")
    return data, model


ALL_SDS_ZERO = (
    "--sd-rater, --sd-rater-kind, --sd-pair and --sd-noise are all 0: every rating of a kind "
    "would be the same scale point, so the raters cannot be calibrated to a true mean between "
    "two points; give one of them a positive value"
)


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
    from app.simulate.http import run_http_crowd
    from app.simulate.http_ratings import run_http_raters
    from app.simulate.judges import GodView, ModelJudge, SimulationError, StandInJudge
    from app.simulate.rater_judges import PAPER_CONSISTENCY, PAPER_QUALITY, RaterJudge
    from app.simulate.raters import RaterHeterogeneity

    try:
        made = Crowd.parse(crowd)
    except CrowdSpecError as exc:
        fail(str(exc))
    settings = load_settings()
    with session_scope(settings) as session:
        study_id = study_named(session, study).id
    make_session = make_sessionmaker(command_engine(settings))
    rater_options = {
        "--quality": quality,
        "--consistency": consistency,
        "--sd-rater": sd_rater,
        "--sd-rater-kind": sd_rater_kind,
        "--sd-pair": sd_pair,
        "--sd-noise": sd_noise,
    }
    sds = {
        "sd_rater": sd_rater,
        "sd_rater_kind": sd_rater_kind,
        "sd_pair": sd_pair,
        "sd_noise": sd_noise,
    }
    try:
        view = GodView(make_session, study_id).study()
        common = {
            "seed": seed,
            "max_hits": max_hits,
            "parallel": parallel,
            "resend_share": resend_share,
        }
        if view.study_type == "ratings":
            wrong = [
                name
                for name, given in (
                    ("--judge reference", judge == "reference"),
                    ("--true-ebc", true_ebc is not None),
                    ("--cgd-data", cgd_data is not None),
                    ("an oracle crowd", made.base == "oracle"),
                    ("position:SHARE", made.position > 0),
                )
                if given
            ]
            if wrong:
                fail(
                    f"{study} is a ratings study, rated by simulated raters; these options are "
                    f"for next-word studies only: {', '.join(wrong)} (raters take --quality, "
                    "--consistency, --sd-*)"
                )
            hetero = RaterHeterogeneity(**{k: v for k, v in sds.items() if v is not None})
            try:
                hetero.check()
            except ValueError as exc:  # typer keeps each sd >= 0: left is all four at 0
                fail(ALL_SDS_ZERO if hetero.sd_total == 0.0 else str(exc))
            raters = RaterJudge.calibrated(
                view,
                quality=_means(quality, "--quality", PAPER_QUALITY),
                consistency=_means(consistency, "--consistency", PAPER_CONSISTENCY),
                hetero=hetero,
                noisy=made.noisy,
                fast=made.fast,
                spammers=made.spammers,
                seed=seed,
            )
            run = run_http_raters(
                base_url.rstrip("/"), make_session, study_id, settings.secret_key, raters,
                **common,
            )  # fmt: skip
        else:
            given = [name for name, value in rater_options.items() if value is not None]
            if given:
                fail(
                    f"{study} is a next-word study; these options are for {RATERS}: "
                    + ", ".join(given)
                )
            if judge == "reference":
                p_d = ModelJudge()
            else:
                p_d = StandInJudge.calibrated(
                    view,
                    made,
                    true_ebc=1.0 if true_ebc is None else true_ebc,
                    cgd_data=0.73 if cgd_data is None else cgd_data,
                    seed=seed,
                )
            run = run_http_crowd(
                base_url.rstrip("/"), make_session, study_id, settings.secret_key, made, p_d,
                **common,
            )  # fmt: skip
    except (SimulationError, ValueError) as exc:
        fail(str(exc))
    except httpx.HTTPError as exc:
        fail(f"the server at {base_url} did not answer: {exc}")
    typer.echo(run.summary())
    if view.study_type == "ratings":
        typer.echo(
            f"their {run.steps} ratings are stored like anyone's, marked as a simulated crowd's; "
            "their links are revoked"
        )
    else:
        typer.echo(
            f"their {len(run.answers)} judgments are stored like anyone's; the results of "
            f"{study} say that they include a simulated crowd's"
        )
