"""`ebc hits build` and `ebc annotators`: HITs and invite links."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.audit.service import CLI
from app.cli.common import fail, load_settings, session_scope, study_named

hits_cli = typer.Typer(help="HITs: build them from a study's items.")
annotators_cli = typer.Typer(help="Annotators: invite links (create, revoke, re-issue).")


@hits_cli.command("build")
def hits_build(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    attention: Annotated[
        Path | None, typer.Option(help="attention items to add first (JSON lines)")
    ] = None,
    open_: Annotated[
        bool, typer.Option("--open/--no-open", help="open the study to annotators")
    ] = True,
) -> None:
    """Place the study's unplaced items into HITs; report what is left over."""
    import json

    from app.hits.service import load_attention_items
    from app.studies.service import build_and_open

    try:
        with session_scope(load_settings()) as session:
            found = study_named(session, study)
            if attention is not None:
                lines = attention.read_text(encoding="utf-8").splitlines()
                rows = [json.loads(line) for line in lines if line.strip()]
                typer.echo(f"added {load_attention_items(session, found, rows)} attention items")
            report = build_and_open(session, found, open_=open_, by=CLI)
    except ValueError as exc:  # HitBuildError, StudyError, a line that is not JSON
        fail(str(exc))
    for line in report.lines():
        typer.echo(line)


@annotators_cli.command("invite")
def annotators_invite(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    count: Annotated[int, typer.Option(help="how many annotators to create")] = 1,
    label: Annotated[str | None, typer.Option(help="a name for them (numbered)")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="write label,link here")] = None,
) -> None:
    """Create invited annotators and print (or write) their signed links."""
    from app.annotation.admin import invite, links_csv
    from app.annotation.errors import AnnotationError

    settings = load_settings()
    try:
        with session_scope(settings) as session:
            made = invite(session, study_named(session, study), count, label, by=CLI)
            table = links_csv(settings.base_url, settings.secret_key, made)
    except AnnotationError as exc:
        fail(str(exc))
    if csv_out is not None:
        csv_out.write_text(table, encoding="utf-8")
        typer.echo(f"wrote {count} links to {csv_out}")
    else:
        typer.echo(table, nl=False)


def _change_link(study: str, annotator: str, reissue: bool) -> None:
    from app.annotation.admin import find_annotator, invite_link, reissue_invite, revoke_invite
    from app.annotation.errors import AnnotationError

    settings = load_settings()
    try:
        with session_scope(settings) as session:
            found = study_named(session, study)
            a = find_annotator(session, found, annotator)
            (reissue_invite if reissue else revoke_invite)(session, a, by=CLI)
            link = invite_link(settings.base_url, settings.secret_key, a)
            name = a.label or str(a.id)
    except AnnotationError as exc:
        fail(exc.message)
    if reissue:
        typer.echo(f"{name}\t{link}")
    else:
        typer.echo(f"revoked the invite link of {name}")


@annotators_cli.command("revoke")
def annotators_revoke(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    annotator: Annotated[str, typer.Argument(help="the annotator's id or (unique) label")],
) -> None:
    """Make an invited annotator's link stop working (their judgments are kept)."""
    _change_link(study, annotator, reissue=False)


@annotators_cli.command("reissue")
def annotators_reissue(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    annotator: Annotated[str, typer.Argument(help="the annotator's id or (unique) label")],
) -> None:
    """Print a new link for an invited annotator; the old one stops working."""
    _change_link(study, annotator, reissue=True)
