"""`ebc study`: studies, and who may see or run them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.audit.service import CLI
from app.cli.common import fail, load_settings, session_scope, study_named, user_named

study_cli = typer.Typer(
    help=(
        "Studies, and who may see or run them. The CLI is the operator's tool: whoever runs "
        "it holds the database's credentials, so it acts as an administrator on every "
        "study. Owners and members (share, unshare) govern the dashboard and the API."
    )
)


@study_cli.command("create")
def study_create(
    config: Annotated[Path, typer.Option("--config", "-c", help="study file (TOML)")],
    owner: Annotated[
        str | None,
        typer.Option(help="the researcher who owns it; without one only administrators see it"),
    ] = None,
) -> None:
    """Create a study from a study file."""
    from app.studies.service import StudyError, create_study, load_config

    try:
        cfg = load_config(config)
        with session_scope(load_settings()) as session:
            owned_by = user_named(session, owner) if owner else None
            study = create_study(session, cfg, created_by=owned_by, by=CLI)
            slug = study.slug
    except StudyError as exc:
        fail(str(exc))
    typer.echo(f"created study {slug}" + (f" owned by {owner}" if owner else ""))


@study_cli.command("list")
def study_list(
    user: Annotated[
        str | None, typer.Option(help="only the studies this researcher may see, with access")
    ] = None,
) -> None:
    """List the studies."""
    from app.studies.service import list_studies, study_access, visible_studies

    with session_scope(load_settings()) as session:
        who = user_named(session, user) if user else None
        for s in visible_studies(session, who) if who else list_studies(session):
            lengths = ",".join(map(str, s.prefix_lengths))
            line = f"{s.slug}\t{s.status.value}\t{s.task.value}\tl={lengths}\t{s.title}"
            if who:
                line += f"\t{study_access(session, s, who).name}"
            typer.echo(line)


@study_cli.command("share")
def study_share(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    username: Annotated[str, typer.Argument(help="the researcher to share it with")],
    role: Annotated[
        str,
        typer.Option(
            help="view: pages, results, exports, no invite links, no changes; "
            "manage: everything the owner can do"
        ),
    ] = "view",
) -> None:
    """Let a researcher see (or run) a study; again with another --role changes theirs."""
    from app.studies.service import StudyError, share_study

    try:
        with session_scope(load_settings()) as session:
            found, user = study_named(session, study), user_named(session, username)
            share_study(session, found, user, role, by=CLI)
    except StudyError as exc:
        fail(str(exc))
    typer.echo(f"{username} may {role} {study}")


@study_cli.command("unshare")
def study_unshare(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    username: Annotated[str, typer.Argument(help="the member to remove")],
) -> None:
    """Remove a researcher's access to a study (the owner's cannot be removed: set-owner)."""
    from app.studies.service import StudyError, unshare_study

    try:
        with session_scope(load_settings()) as session:
            found, user = study_named(session, study), user_named(session, username)
            unshare_study(session, found, user, by=CLI)
    except StudyError as exc:
        fail(str(exc))
    typer.echo(f"{username} no longer has access to {study}")


@study_cli.command("set-owner")
def study_set_owner(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    username: Annotated[str, typer.Argument(help="the new owner")],
) -> None:
    """Give a study to a researcher (e.g. one made with `study create` without --owner)."""
    from app.studies.service import set_owner

    with session_scope(load_settings()) as session:
        found, user = study_named(session, study), user_named(session, username)
        set_owner(session, found, user, by=CLI)
    typer.echo(f"{username} owns {study}")


@study_cli.command("members")
def study_members(study: Annotated[str, typer.Argument(help="the study's slug")]) -> None:
    """Print the study's owner and members with their roles."""
    from app.studies.queries import study_people

    with session_scope(load_settings()) as session:
        people = study_people(session, study_named(session, study))
        typer.echo(f"{people.owner.username if people.owner else '(no owner)'}\towner")
        for user, role in people.members:
            typer.echo(f"{user.username}\t{role}")
