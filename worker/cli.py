"""`ebc worker` and `ebc precompute`, registered into the `ebc` CLI as a plugin.

`app` never imports `worker`: the `ebc.cli` entry point in pyproject.toml lets
the CLI find these commands. torch loads only when one of them runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy import select


def register(cli: typer.Typer) -> None:
    cli.command("worker")(worker_command)
    cli.command("precompute")(precompute_command)
    cli.command("demo")(demo_command)
    cli.command("samples")(samples_command)


def worker_command(
    once: Annotated[bool, typer.Option("--once", help="exit when no shard is left")] = False,
    device: Annotated[str | None, typer.Option(help="cuda, cuda:1, cpu (default: auto)")] = None,
    batch_size: Annotated[int | None, typer.Option(help="rows per batch (default: auto)")] = None,
    dtype: Annotated[str, typer.Option(help="float32, float16, bfloat16 or auto")] = "float32",
    lease: Annotated[float, typer.Option(help="shard lease in seconds")] = 120.0,
    study: Annotated[str | None, typer.Option(help="only this study's shards")] = None,
    shards_per_claim: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="contiguous shards of one cell claimed and made in one run "
            "(default: 4 on a GPU, 1 on a CPU)",
        ),
    ] = None,
) -> None:
    """Claim precompute shards from the database and make their items."""
    from app.cli.common import fail, load_settings
    from worker.runner import Worker, WorkerOptions

    settings = load_settings()
    options = WorkerOptions(
        device=device,
        dtype=dtype,
        batch_size=batch_size,
        lease_seconds=lease,
        once=once,
        shards_per_claim=shards_per_claim,
    )
    if study is not None:
        options.study_id = _study_id(settings, study) or fail(f"no study {study!r}")
    w = Worker(settings, options)
    typer.echo(f"worker {w.worker_id} waiting for shards" + ("" if not once else " (--once)"))
    try:
        done = w.run(lambda shard, n: typer.echo(f"shard {shard.id}: {n} items"))
    finally:
        w.close()
    typer.echo(f"worker {w.worker_id}: {done} shards done")


def precompute_command(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    device: Annotated[str | None, typer.Option(help="cuda, cpu (default: auto)")] = None,
    batch_size: Annotated[int | None, typer.Option(help="rows per batch (default: auto)")] = None,
    shard_size: Annotated[
        int | None, typer.Option(help="items per shard (default: 256)", min=1)
    ] = None,
) -> None:
    """Plan the study's precompute job and run it here, with a progress bar."""

    from app.audit.service import CLI
    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.models import StudyStatus
    from app.precompute.datasets import DatasetError
    from app.precompute.service import DEFAULT_SHARD_SIZE, PrecomputeError, plan_precompute

    settings = load_settings()
    with session_scope(settings) as session:
        row = study_named(session, study)
        size = shard_size or DEFAULT_SHARD_SIZE
        try:
            if row.status is not StudyStatus.precomputing:  # else its unfinished job resumes
                plan_precompute(session, row, shard_size=size, by=CLI)
        except (DatasetError, PrecomputeError) as exc:
            fail(str(exc))
        study_id = row.id
    _run_study(settings, study_id, f"precompute {study}", device=device, batch_size=batch_size)


def samples_command(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    device: Annotated[str | None, typer.Option(help="cuda, cpu (default: auto)")] = None,
    batch_size: Annotated[int | None, typer.Option(help="rows per batch (default: auto)")] = None,
) -> None:
    """Make the study's missing forced-prefix samples (its [samples]; its items done): what a
    worker does when a job ends, again after a failure or a crash."""
    from app.cli.common import fail, load_settings, session_scope, study_named
    from app.models import JobStatus
    from app.precompute.service import latest_job
    from worker.runner import Worker, WorkerOptions

    settings = load_settings()
    with session_scope(settings) as session:
        row = study_named(session, study)
        job = latest_job(session, row)
        if job is None or job.status is not JobStatus.done:
            fail(f"{study}'s items are not done: samples are made after them")
        job_id = job.id
        session.expunge(row)
    w = Worker(settings, WorkerOptions(device=device, batch_size=batch_size))
    try:
        stored, error = w.samples_when_done(row, job_id)
    finally:
        w.close()
    if error:
        fail(f"the samples of {study} failed: {error}")
    typer.echo(f"{study}: {stored} forced-prefix samples stored")


def _study_id(settings, slug: str) -> int | None:
    from app.cli.common import session_scope
    from app.studies.service import get_study

    with session_scope(settings) as session:
        row = get_study(session, slug)
        return row.id if row else None


def demo_command(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8000,
    serve: Annotated[bool, typer.Option("--serve/--no-serve", help="start the web app")] = True,
    steps: Annotated[int, typer.Option(help="demo model training steps")] = 1800,
    max_seconds: Annotated[float, typer.Option(help="cap on training time")] = 180,
    corpus: Annotated[
        Path | None,
        typer.Option(
            help="train on this plain-text file (one paragraph per line) instead of Jane Austen",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ] = None,
    items_per_cell: Annotated[int, typer.Option(help="items per (length, kind)")] = 300,
    simulated_crowd: Annotated[
        bool,
        typer.Option(
            "--simulated-crowd",
            help="let a simulated crowd (labelled as such) do most HITs through the real "
            "pages first, so the results page has figures to show",
        ),
    ] = False,
) -> None:
    """The whole loop on the embedded default: model, study, precompute, HITs, serve."""
    from app.annotation.identities import create_local_annotators, invite_token
    from app.audit.service import CLI
    from app.cli.common import fail, load_settings, migrate_database, session_scope
    from app.cli.server import serve as serve_app
    from app.db import make_sessionmaker
    from app.demo import (
        add_demo_attention,
        demo_config,
        demo_crowd_due,
        run_demo_crowd,
        seed_demo,
    )
    from app.models import Annotator, Channel, Study, StudyStatus
    from app.precompute.service import plan_precompute
    from app.studies.service import build_and_open
    from worker.demo import CorpusError, build_demo_model

    settings = load_settings()
    migrate_database(settings)
    lines = None
    if corpus is not None:
        lines = [ln for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]
    try:
        model = build_demo_model(
            settings.data_dir / "demo",
            steps=steps,
            max_seconds=max_seconds,
            corpus=lines,
            log=typer.echo,
        )
    except CorpusError as exc:  # e.g. no apt-get: a message that says what to do, no traceback
        fail(str(exc))
    config = demo_config(model.model_dir, model.heldout_path, items_per_cell=items_per_cell)
    with session_scope(settings) as session:
        seeded = seed_demo(session, config)
        study_id, username, password = seeded.study.id, seeded.username, seeded.password
        if seeded.study.status is StudyStatus.draft:  # a precomputing one resumes below
            plan_precompute(session, seeded.study, by=CLI)
    _run_study(settings, study_id, f"precompute {config.slug}")
    with session_scope(settings) as session:
        study = session.get(Study, study_id)
        if study.status is StudyStatus.ready:
            if added := add_demo_attention(session, study):
                typer.echo(f"{added} attention items added (the demo's attention file)")
            for line in build_and_open(session, study, by=CLI).lines():
                typer.echo(line)
        annotator = (
            session.scalar(
                select(Annotator)
                .where(
                    Annotator.study_id == study_id,
                    Annotator.channel == Channel.local,
                    Annotator.simulated.is_(False),
                )
                .order_by(Annotator.id)
            )
            or create_local_annotators(session, study, 1, label="demo")[0]
        )
        token = invite_token(settings.secret_key, annotator)
    if simulated_crowd:
        from app.cli.common import command_engine
        from app.cli.server import background_server

        make_session = make_sessionmaker(command_engine(settings))
        run = None
        if demo_crowd_due(make_session, study_id):  # no server started for nothing
            with background_server(settings) as local:
                run = run_demo_crowd(local, make_session, study_id, settings.secret_key)
        typer.echo(
            run.summary()
            if run
            else "simulated crowd: not run (it ran on an earlier start, or too few HITs are open)"
        )
    base = f"http://{host}:{port}"
    typer.echo("")
    typer.echo(f"  dashboard:       {base}/dashboard")
    typer.echo(f"  admin login:     {username} / {password}")
    typer.echo(f"  annotator link:  {base}/a/{token}")
    typer.echo(f"  results (API):   {base}/api/v1/docs")
    typer.echo("")
    if serve:
        serve_app(host=host, port=port, workers=1, migrate=False)


def _run_study(
    settings, study_id: int, label: str, *, device: str | None = None, batch_size: int | None = None
) -> None:
    """Run a study's open shards here, with a progress bar; nothing to do is fine."""
    from rich.progress import MofNCompleteColumn, Progress, TimeRemainingColumn

    from app.cli.common import fail, session_scope
    from app.models import JobStatus, PrecomputeJob
    from app.precompute.service import job_progress
    from worker.runner import Worker, WorkerOptions

    with session_scope(settings) as session:
        job = session.scalar(
            select(PrecomputeJob)
            .where(PrecomputeJob.study_id == study_id)
            .order_by(PrecomputeJob.id.desc())
        )
        if job is None or job.status not in (JobStatus.pending, JobStatus.running):
            return
        job_id, total = job.id, job.total_items
    columns = (*Progress.get_default_columns()[:-1], MofNCompleteColumn(), TimeRemainingColumn())
    options = WorkerOptions(once=True, study_id=study_id, device=device, batch_size=batch_size)
    w = Worker(settings, options)
    try:
        with Progress(*columns) as bar:
            task = bar.add_task(label, total=total)

            def advance(_shard, _n) -> None:
                with session_scope(settings) as session:
                    done = job_progress(session, session.get(PrecomputeJob, job_id)).items_done
                bar.update(task, completed=done)

            w.run(advance)
    finally:
        w.close()
    with session_scope(settings) as session:
        progress = job_progress(session, session.get(PrecomputeJob, job_id))
        status = progress.job.status
        errors = [c for c in progress.cells if c.last_error]
    typer.echo(f"job {job_id}: {status.value}, {progress.items_done}/{progress.items_total} items")
    for cell in errors:
        last_line = cell.last_error.strip().splitlines()[-1]
        typer.secho(f"  l={cell.length} {cell.kind}: {last_line}", err=True, fg=typer.colors.RED)
    if status is not JobStatus.done:
        fail("precompute did not finish")
