"""`ebc crowd ...`: publish a study on a crowd platform, sync, review and pay (issue 13).

Each verb calls a driver of `app.crowd` (`publishing`, `sync`, `payments`), the one the
dashboard calls; the drivers run their own units of work (a ledger row is committed before
each platform call).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from app.annotation.admin import MAX_BATCH
from app.audit.service import CLI
from app.cli.common import command_engine, fail, load_settings
from app.crowd.audience import Audience, audience
from app.crowd.registry import PLATFORMS, page_default, page_order

crowd_cli = typer.Typer(
    help="Crowd platforms (MTurk, Prolific) and the local channel (invite links): publish, "
    "sync, approve, reject, bonus, block, expire, balance."
)

Study = Annotated[str, typer.Argument(help="the study's slug")]
Provider = Annotated[
    str | None,
    typer.Option(
        "--provider",
        help=" | ".join(PLATFORMS) + "; default: the first channel the study enables, in the "
        "Crowd page's order (" + ", ".join(p.name for p in page_order()) + "; `ebc crowd "
        "platforms` says what each can do)",
        show_default=False,
    ),
]
Production = Annotated[
    bool | None,
    typer.Option(
        "--production/--sandbox",
        help="MTurk's production (real money; needs EBC_MTURK_PRODUCTION) or its sandbox "
        "(the default); Prolific has production only",
    ),
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]


def _cents(cents: int | None) -> str:
    return "-" if cents is None else f"${cents // 100:,}.{cents % 100:02d}"


def _balance(made, cents: int | None) -> str:
    # A platform reached by no call (invite links) pays nothing through us (None by design).
    remote = PLATFORMS[made.name].caps.remote
    return "not applicable" if cents is None and not remote else _cents(cents)


def _study_channel(make_session, study: str | None) -> str:
    """The provider when `--provider` is not given: the first channel the study enables,
    as its Crowd page opens (`page_default`: Prolific, then MTurk, then the invite links)."""
    from app.crowd.common import study_named
    from app.db import unit_of_work

    if study is None:
        fail("give a study (its first enabled channel is used) or --provider")
    with unit_of_work(make_session) as session:
        name = page_default(study_named(session, study)).name
    typer.echo(f"provider: {name} (the study's first channel; --provider chooses)", err=True)
    return name


@contextmanager
def _crowd(
    provider: str | None, production: bool | None, study: str | None, **options: int
) -> Iterator[tuple]:
    """Settings, a session factory, the provider (None: the study's first channel); service
    errors end the command."""
    from app.crowd.base import CrowdError
    from app.crowd.common import CrowdServiceError, provider_for
    from app.db import make_sessionmaker

    settings = load_settings()
    environment = None if production is None else ("production" if production else "sandbox")
    try:
        make_session = make_sessionmaker(command_engine(settings))
        if provider is None:
            provider = _study_channel(make_session, study)
        made = provider_for(settings, provider, environment, sessions=make_session, **options)
        yield settings, make_session, made
    except CrowdServiceError as exc:
        fail(exc.message)
    except CrowdError as exc:
        fail(f"{provider}: {exc}")


@crowd_cli.command("publish")
def publish(
    study: Study,
    provider: Provider = None,
    production: Production = None,
    reward_cents: Annotated[
        int | None, typer.Option(help="per assignment; default: the study's payment")
    ] = None,
    title: Annotated[str | None, typer.Option(help="default: the study's title")] = None,
    lifetime_days: Annotated[float, typer.Option(help="how long HITs stay listed")] = 7,
    auto_approve_days: Annotated[float, typer.Option(help="approved unless reviewed by")] = 3,
    min_approval_rate: Annotated[
        int | None, typer.Option(help="percent, e.g. 95; default: the study file's")
    ] = None,
    min_approved: Annotated[
        int | None, typer.Option(help="approved HITs, e.g. 1000; default: the study file's")
    ] = None,
    locale: Annotated[
        list[str] | None,
        typer.Option(help="country code (repeatable), e.g. US; default: the study file's"),
    ] = None,
    masters: Annotated[
        bool | None,
        typer.Option(
            "--masters/--no-masters", help="Masters workers only (+5% fee); default: the study's"
        ),
    ] = None,
    cap_qualification: Annotated[
        bool,
        typer.Option(help="hide the study from workers at the cap (MTurk qualification)"),
    ] = True,
    hits_per_participant: Annotated[
        int, typer.Option(help="Prolific: HITs one participant (one place) does and is paid for")
    ] = 1,
    limit: Annotated[int | None, typer.Option(help="publish at most this many HITs now")] = None,
    invites: Annotated[
        int,
        typer.Option(
            help="local: then create this many invited annotators and print their links "
            "(as `ebc annotators invite`)",
            # Checked before anything is published, not after.
            min=0,
            max=MAX_BATCH,
        ),
    ] = 0,
    yes: Yes = False,
) -> None:
    """Publish every HIT not yet on the platform (resumable: run it again after a crash).

    Qualifications not given here come from the study file's `channels.mturk`. The local
    channel records the posting for the ledger; its annotators work through their invite
    links (`--invites N` makes N more)."""
    from app.crowd import publishing
    from app.crowd.common import PublishOptions, study_named
    from app.db import unit_of_work

    options = PublishOptions(
        reward_cents=reward_cents,
        title=title,
        lifetime_days=lifetime_days,
        auto_approve_days=auto_approve_days,
        min_approval_rate=min_approval_rate,
        min_approved=min_approved,
        locales=tuple(c.upper() for c in locale) if locale else None,
        masters=masters,
        cap_qualification=cap_qualification,
    )
    bundle = {"hits_per_participant": hits_per_participant} if hits_per_participant != 1 else {}
    if invites and provider is not None and not _local(provider):
        fail("--invites is for the local channel: crowd workers come through their platform")
    with _crowd(provider, production, study, **bundle) as (settings, make_session, made):
        if invites and not _local(made.name):  # checked before anything is published
            fail("--invites is for the local channel: crowd workers come through their platform")
        with unit_of_work(make_session) as session:
            found = study_named(session, study)
            cost = publishing.estimate(session, settings, found, made, options)
            who = audience(session, found, PLATFORMS[made.name])
        _echo_audience(who, PLATFORMS[made.name].label)
        typer.echo(
            f"{made.name} ({made.environment}): rewards {_cents(cost.rewards_cents)}, fees "
            f"{_cents(cost.fees_cents)}, total {_cents(cost.total_cents)}"
        )
        for note in cost.notes:
            typer.echo(f"  note: {note}")
        typer.echo(f"balance: {_balance(made, made.balance_cents())}")
        if not yes and not typer.confirm("publish?", default=False):
            raise typer.Exit(1)
        report = publishing.publish(
            make_session, settings, study, made, options, by=CLI, limit=limit
        )
    for warning in report.warnings:
        typer.echo(f"warning: {warning}")
    if report.reopened:
        typer.echo(f"reopened {report.reopened} expired HITs: they take new work again")
    typer.echo(
        f"published {report.published} now; {report.total} on {made.name} in all, "
        f"{report.pending} still to publish (HIT type {report.external_id})"
    )
    if invites:
        from app.cli.hits import annotators_invite

        annotators_invite(study, count=invites, label=None, csv_out=None)


def _local(provider: str) -> bool:
    found = PLATFORMS.get(provider)
    return found is not None and not found.caps.remote


def _echo_audience(who: Audience, label: str) -> None:
    """Who may take part, before publishing (as the Crowd page shows it)."""
    for key, value in sorted(who.prescreeners.items()):
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        typer.echo(f"prescreener {key}: {shown}")
    if who.excluded:
        how = f"; {label}'s {who.how}" if who.how else f"; {label}: our records only"
        typer.echo(
            f"excluded: people of {', '.join(who.excluded)} (refused at entry{how}: "
            f"{len(who.units)} earlier postings, {who.workers} earlier workers)"
        )
    for slug in who.unknown:
        typer.echo(f"warning: participants.exclude_studies names {slug!r}, which no study is")


@crowd_cli.command("sync")
def sync(study: Study, provider: Provider = None, production: Production = None) -> None:
    """Reconcile the platform's submissions with ours; report the ones we never stored."""
    from app.crowd import sync as crowd_sync

    with _crowd(provider, production, study) as (settings, make_session, made):
        report = crowd_sync.sync(make_session, settings, study, made, by=CLI)
    typer.echo(
        f"listed {report.listed}, confirmed {report.confirmed}, reviews taken {report.reviewed}, "
        f"recovered {report.recovered}, cap qualifications given {report.qualified}"
    )
    if report.sandbox_kept_out:
        typer.echo(
            f"not confirmed: {report.sandbox_kept_out} sandbox assignments (the study is in "
            "production: sandbox work never counts)"
        )
    for flag in report.flagged:
        state = "recovered" if flag.recovered else "NOT stored"
        typer.echo(
            f"flagged: {flag.external_assignment_id} (worker {flag.external_worker_id}, "
            f"{flag.status}): {flag.reason} [{state}]"
        )


@crowd_cli.command("approve")
def approve(
    study: Study,
    provider: Provider = None,
    production: Production = None,
    assignment: Annotated[
        str | None, typer.Option(help="one assignment (ours or the platform's id)")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="every confirmed, unreviewed one")] = False,
    apply_exclusions: Annotated[
        bool, typer.Option(help="with --all: reject whom the study's exclusion rules drop")
    ] = False,
    feedback: Annotated[str | None, typer.Option(help="a note to approved workers")] = None,
    reject_feedback: Annotated[
        str | None, typer.Option(help="the note rejected workers read (needed to reject)")
    ] = None,
    reject_category: Annotated[
        str | None, typer.Option(help="Prolific's rejection category, e.g. FAILED_CHECK")
    ] = None,
    yes: Yes = False,
) -> None:
    """Approve one assignment, or all of them after a preview (a second approval: no-op)."""
    from app.crowd import payments

    if (assignment is None) == (not all_):
        fail("give --assignment ID or --all")
    with _crowd(provider, production, study) as (settings, make_session, made):
        if assignment is not None:
            outcome = payments.approve(
                make_session, study, made, assignment, feedback=feedback, by=CLI
            )
            typer.echo(f"approved {assignment}" if outcome.made else "already approved")
            return
        plan = payments.preview_approve_all(
            make_session, study, made, apply_exclusions=apply_exclusions
        )
        typer.echo(f"to approve: {len(plan.approve)}")
        typer.echo(f"to reject: {len(plan.reject)}")
        for item in plan.reject:
            typer.echo(
                f"  reject {item.external_assignment_id} ({item.worker}): "
                + "; ".join(item.reasons)
            )
        if plan.unconfirmed:
            typer.echo(f"not yet confirmed by the platform (run sync): {plan.unconfirmed}")
        for flag in plan.flagged:
            typer.echo(
                f"flagged, never stored (not approved; reject it with `ebc crowd reject "
                f"--assignment {flag.platform_id}`, else the platform pays it): worker "
                f"{flag.worker}, {flag.reason}"
            )
        if not plan.approve and not plan.reject:
            return
        if not yes and not typer.confirm("go ahead?", default=False):
            raise typer.Exit(1)
        report = payments.approve_all(
            make_session,
            settings,
            study,
            made,
            apply_exclusions=apply_exclusions,
            reject_feedback=reject_feedback,
            reject_category=reject_category,
            approvals_seen=[i.public_id for i in plan.approve],
            rejections_seen=[i.public_id for i in plan.reject],
            feedback=feedback,
            by=CLI,
        )
    typer.echo(
        f"approved {report.approved}, rejected {report.rejected}, already done {report.already}"
    )


@crowd_cli.command("reject")
def reject(
    study: Study,
    assignment: Annotated[
        str,
        typer.Option(
            help="ours or the platform's assignment id (also a flagged submission we never stored)"
        ),
    ],
    feedback: Annotated[str, typer.Option(help="why (the worker reads it; required)")],
    category: Annotated[
        str | None,
        typer.Option(help="Prolific's rejection category (default OTHER), e.g. LOW_EFFORT"),
    ] = None,
    provider: Provider = None,
    production: Production = None,
) -> None:
    """Reject one assignment (no payment), with the feedback the platform requires; on
    Prolific the participant's whole submission. A submission a sync flagged as never
    stored is rejected by the platform's id (else the platform pays it by itself)."""
    from app.crowd import payments

    with _crowd(provider, production, study) as (_settings, make_session, made):
        outcome = payments.reject(
            make_session, study, made, assignment, feedback=feedback, category=category, by=CLI
        )
    typer.echo(f"rejected {assignment}" if outcome.made else "already rejected")


@crowd_cli.command("bonus")
def bonus(
    study: Study,
    assignment: Annotated[str, typer.Option(help="ours or the platform's assignment id")],
    cents: Annotated[int, typer.Option(help="the bonus in cents")],
    reason: Annotated[str, typer.Option(help="the note the worker reads (required)")],
    number: Annotated[
        int, typer.Option(help="which bonus of this assignment (0: the first); paid once each")
    ] = 0,
    provider: Provider = None,
    production: Production = None,
) -> None:
    """Pay a bonus for one assignment: paid once, however often the command is retried."""
    from app.crowd import payments

    with _crowd(provider, production, study) as (_settings, make_session, made):
        outcome = payments.bonus(
            make_session, study, made, assignment, cents, reason=reason, n=number, by=CLI
        )
    typer.echo(f"paid {_cents(cents)}" if outcome.made else "already paid")


@crowd_cli.command("block")
def block(
    study: Study,
    worker: Annotated[str, typer.Option(help="the platform's worker id")],
    reason: Annotated[str, typer.Option(help="why (the platform keeps it)")] = "",
    unblock: Annotated[bool, typer.Option("--unblock", help="lift the block instead")] = False,
    provider: Provider = None,
    production: Production = None,
) -> None:
    """Block a worker on the platform and here (their future work stops), or unblock."""
    from app.crowd import payments

    with _crowd(provider, production, study) as (_settings, make_session, made):
        verb = payments.unblock if unblock else payments.block
        outcome = verb(make_session, study, made, worker, reason=reason, by=CLI)
    done = "unblocked" if unblock else "blocked"
    if not outcome.made:
        typer.echo(f"already {done}")
    elif outcome.detail.startswith("done here only"):
        typer.echo(f"{done} {worker} here only; {outcome.detail.removeprefix('done here only; ')}")
    else:
        typer.echo(f"{done} {worker}")


@crowd_cli.command("expire")
def expire(
    study: Study, provider: Provider = None, production: Production = None, yes: Yes = False
) -> None:
    """Stop new work on the platform: expire every published HIT of the study."""
    from app.crowd import payments

    with _crowd(provider, production, study) as (_settings, make_session, made):
        if not yes and not typer.confirm(f"expire every HIT of {study}?", default=False):
            raise typer.Exit(1)
        outcome = payments.expire(make_session, study, made, by=CLI)
    typer.echo("expired" if outcome.made else "already expired")


@crowd_cli.command("balance")
def balance(
    study: Annotated[str | None, typer.Argument(help="a study (not needed)")] = None,
    provider: Provider = None,
    production: Production = None,
) -> None:
    """The platform account's available balance."""
    from app.crowd import payments

    with _crowd(provider, production, study) as (_settings, _make_session, made):
        shown = _balance(made, payments.balance(made))
    typer.echo(f"{made.name} ({made.environment}) balance: {shown}")


@crowd_cli.command("platforms")
def platforms() -> None:
    """What each crowd platform can do: its declared capabilities, one line each."""
    from app.crowd.registry import capability_table

    rows = capability_table()
    width = max(len(name) for name, _ in rows)
    typer.echo(" " * width + "  " + " | ".join(PLATFORMS))
    for name, values in rows:
        typer.echo(f"{name:<{width}}  " + " | ".join(values))


@crowd_cli.command("export-batch")
def export_batch(
    study: Study,
    out: Annotated[
        Path, typer.Option("--out", help="directory for hit_template.html and the input CSVs")
    ],
) -> None:
    """Write the study's MTurk-format batch (HIT template + input CSV; Turkle reads it).

    One row per HIT: set the tool's assignments per task (MaxAssignments) to the number
    printed for each input file (the HIT's replicas). HITs with other replicas (overlap
    HITs) are in an input file of their own: load each as its own batch.
    """
    from app.cli.common import session_scope, study_named
    from app.crowd.batch import BatchError, write_batch

    with session_scope(load_settings()) as session:
        found = study_named(session, study)
        try:
            template_path, batch = write_batch(session, found, out)
        except BatchError as exc:
            fail(str(exc))
    typer.echo(f"wrote {template_path}")
    for made in batch.inputs:
        typer.echo(
            f"wrote {out / made.name}: {made.hits} HITs, one row each; "
            f"set assignments per task (MaxAssignments) to {made.assignments}"
        )
    typer.echo('Turkle: tick "Login required" (rows without a worker are refused at import).')


ROWS_REFUSED = 3  # import-results: some rows refused (0: all stored; 1: nothing read)


@crowd_cli.command("import-results")
def import_results(
    study: Study,
    results: Annotated[
        Path,
        typer.Argument(
            help="the tool's results file (Batch_results.csv)", exists=True, dir_okay=False
        ),
    ],
    source: Annotated[
        str,
        typer.Option(
            "--source",
            help="the tool installation the file comes from (e.g. lab-turkle): worker and "
            "assignment ids are taken within it; keep the name from one import to the next",
        ),
    ],
) -> None:
    """Store an MTurk-format results file (MTurk, Turkle) of the study's batch.

    Safe to run again: rows stored before are not stored twice. A row that leaves a text
    unanswered is refused whole, as the service's own page refuses it. Exit codes: 0 every
    row is stored (now or by an earlier import); 3 some rows were refused (the others are
    stored; each refusal is printed); 1 nothing was read (no such study, a closed study, a
    bad source name, a file that is not a results file of this batch).
    """
    from app.cli.common import session_scope, study_named
    from app.crowd.batch import BatchError, cell
    from app.crowd.imports import import_results as store_results
    from app.db import begin_write

    try:
        text = results.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        fail(f"{results} is not a UTF-8 text file")
    with session_scope(load_settings()) as session:
        begin_write(session)  # SQLite: a writer from the start (many rows, one transaction)
        found = study_named(session, study)
        try:
            report = store_results(session, found, text, source=source, by=CLI)
        except BatchError as exc:
            fail(str(exc))
    typer.echo(
        f"stored {report.stored}, repeated {report.repeated}, refused {report.skipped}"
        + (f" ({report.too_fast} judgments faster than the minimum)" if report.too_fast else "")
    )
    for verb, rows in (("refused", report.errors), ("repeated", report.differing)):
        for row in rows:
            hit = row.hit if row.hit and row.hit.isdigit() else cell(row.hit)  # from the file
            typer.echo(f"{verb} line {row.line} (HIT {hit}): {row.message}")
    if report.errors:
        raise typer.Exit(ROWS_REFUSED)
