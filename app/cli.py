"""The `ebc` command line. Each command owns its transaction."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy import select
from sqlalchemy.orm import Session

from app import __version__
from app.config import Settings

cli = typer.Typer(help="ebc-judge: exposure bias of language models, judged by people.")
db_cli = typer.Typer(help="Database schema (Alembic migrations).")
admin_cli = typer.Typer(help="Researcher accounts and API tokens.")
study_cli = typer.Typer(
    help=(
        "Studies, and who may see or run them. The CLI is the operator's tool: whoever runs "
        "it holds the database's credentials, so it acts as an administrator on every "
        "study. Owners and members (share, unshare) govern the dashboard and the API."
    )
)
cli.add_typer(db_cli, name="db")
cli.add_typer(admin_cli, name="admin")
cli.add_typer(study_cli, name="study")
hits_cli = typer.Typer(help="HITs: build them from a study's items.")
annotators_cli = typer.Typer(help="Annotators: invite links (create, revoke, re-issue).")
cli.add_typer(hits_cli, name="hits")
cli.add_typer(annotators_cli, name="annotators")

# `ebc results` lives with the results module.
from app.results.cli import register as _register_results  # noqa: E402

_register_results(cli)


def load_settings() -> Settings:
    try:
        return Settings()
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        fail(f"configuration error: {exc}")


def fail(message: str, code: int = 1):
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


@contextmanager
def session_scope(settings: Settings) -> Iterator[Session]:
    from app.db import build_engine, make_sessionmaker

    engine = build_engine(settings)
    try:
        with make_sessionmaker(engine)() as session, session.begin():
            yield session
    finally:
        engine.dispose()


def migrate_database(settings: Settings, revision: str = "head") -> None:
    from app.db import build_engine
    from app.migrate import upgrade

    engine = build_engine(settings)
    try:
        with engine.begin() as conn:
            upgrade(conn, revision)
    finally:
        engine.dispose()


@cli.command()
def version() -> None:
    """Print the service version."""
    typer.echo(f"ebc-judge {__version__}")


@db_cli.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Migrate the database to REVISION (default: the latest)."""
    settings = load_settings()
    migrate_database(settings, revision)
    typer.echo(f"database at {revision}: {_redacted(settings.database_url)}")


@db_cli.command("downgrade")
def db_downgrade(revision: str) -> None:
    """Migrate the database down to REVISION ('base' empties it)."""
    from app.db import build_engine
    from app.migrate import downgrade

    engine = build_engine(load_settings())
    try:
        with engine.begin() as conn:
            downgrade(conn, revision)
    finally:
        engine.dispose()
    typer.echo(f"database at {revision}")


@db_cli.command("current")
def db_current() -> None:
    """Print the database's revision and the latest one."""
    from app.db import build_engine
    from app.migrate import current_revisions, head_revisions

    engine = build_engine(load_settings())
    try:
        with engine.connect() as conn:
            current = current_revisions(conn)
    finally:
        engine.dispose()
    typer.echo(f"current: {', '.join(sorted(current)) or '(empty)'}")
    typer.echo(f"head:    {', '.join(sorted(head_revisions()))}")


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    workers: Annotated[int, typer.Option(help="web processes")] = 1,
    migrate: Annotated[bool, typer.Option(help="migrate the database first")] = True,
) -> None:
    """Migrate the database, then serve the web app with uvicorn."""
    import uvicorn

    settings = load_settings()
    if migrate:
        migrate_database(settings)
    typer.echo(f"serving on http://{host}:{port}  (database: {_redacted(settings.database_url)})")
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=settings.log_level,
        # X-Forwarded-For is read by the app itself, from EBC_TRUSTED_PROXIES only; uvicorn's
        # own handling would trust 127.0.0.1 (or FORWARDED_ALLOW_IPS) besides.
        proxy_headers=False,
    )


@admin_cli.command("create-user")
def create_user(
    username: str,
    password: Annotated[
        str | None, typer.Option(help="omit to be prompted; '-' reads it from standard input")
    ] = None,
    admin: Annotated[bool, typer.Option("--admin", help="may manage users and tokens")] = False,
) -> None:
    """Create a researcher account."""
    from app.auth.service import AuthError
    from app.auth.service import create_user as _create

    password = _read_password(password)
    settings = load_settings()
    try:
        with session_scope(settings) as session:
            _create(session, username, password, is_admin=admin)
    except AuthError as exc:
        fail(str(exc))
    typer.echo(f"created user {username}{' (admin)' if admin else ''}")


@admin_cli.command("set-password")
def set_password(
    username: str,
    password: Annotated[str | None, typer.Option(help="'-' reads it from standard input")] = None,
) -> None:
    """Set a researcher's password."""
    from app.auth.service import AuthError
    from app.auth.service import set_password as _set
    from app.models import User

    password = _read_password(password)
    try:
        with session_scope(load_settings()) as session:
            user = session.scalar(select(User).where(User.username == username))
            if user is None:
                fail(f"no user {username!r}")
            _set(session, user, password)
    except AuthError as exc:
        fail(str(exc))
    typer.echo(f"password set for {username}")


@admin_cli.command("create-token")
def create_token(
    username: str, name: Annotated[str, typer.Option(help="what the token is for")] = "cli"
) -> None:
    """Create an API token for USERNAME; it is printed once."""
    from app.auth.service import create_api_token
    from app.models import User

    with session_scope(load_settings()) as session:
        user = session.scalar(select(User).where(User.username == username))
        if user is None:
            fail(f"no user {username!r}")
        new = create_api_token(session, user, name)
    typer.echo(new.secret)


@admin_cli.command("revoke-token")
def revoke_token(prefix: Annotated[str, typer.Argument(help="the token's first 12 characters")]):
    """Revoke the API token that starts with PREFIX."""
    from app.auth.service import revoke_api_token
    from app.models import ApiToken

    with session_scope(load_settings()) as session:
        tokens = session.scalars(select(ApiToken).where(ApiToken.prefix == prefix[:12])).all()
        if len(tokens) != 1:
            fail(f"{len(tokens)} tokens start with {prefix!r}; give the 12-character prefix")
        revoke_api_token(session, tokens[0])
    typer.echo(f"revoked {prefix[:12]}…")


def _user_named(session: Session, username: str):
    from app.auth.service import user_by_name

    user = user_by_name(session, username)
    if user is None:
        fail(f"no user {username!r}")
    return user


def _study_named(session: Session, slug: str):
    from app.studies.service import get_study

    found = get_study(session, slug)
    if found is None:
        fail(f"no study {slug!r}")
    return found


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
            by = _user_named(session, owner) if owner else None
            study = create_study(session, cfg, created_by=by)
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
        who = _user_named(session, user) if user else None
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
    from app.audit.service import record
    from app.studies.service import StudyError, share_study

    try:
        with session_scope(load_settings()) as session:
            found, user = _study_named(session, study), _user_named(session, username)
            share_study(session, found, user, role)
            record(session, "study_shared", study=found, member=username, role=role, by="cli")
    except StudyError as exc:
        fail(str(exc))
    typer.echo(f"{username} may {role} {study}")


@study_cli.command("unshare")
def study_unshare(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    username: Annotated[str, typer.Argument(help="the member to remove")],
) -> None:
    """Remove a researcher's access to a study (the owner's cannot be removed: set-owner)."""
    from app.audit.service import record
    from app.studies.service import StudyError, unshare_study

    try:
        with session_scope(load_settings()) as session:
            found, user = _study_named(session, study), _user_named(session, username)
            unshare_study(session, found, user)
            record(session, "study_unshared", study=found, member=username, by="cli")
    except StudyError as exc:
        fail(str(exc))
    typer.echo(f"{username} no longer has access to {study}")


@study_cli.command("set-owner")
def study_set_owner(
    study: Annotated[str, typer.Argument(help="the study's slug")],
    username: Annotated[str, typer.Argument(help="the new owner")],
) -> None:
    """Give a study to a researcher (e.g. one made with `study create` without --owner)."""
    from app.audit.service import record
    from app.studies.service import set_owner

    with session_scope(load_settings()) as session:
        found, user = _study_named(session, study), _user_named(session, username)
        set_owner(session, found, user)
        record(session, "study_owner_set", study=found, owner=username, by="cli")
    typer.echo(f"{username} owns {study}")


@study_cli.command("members")
def study_members(study: Annotated[str, typer.Argument(help="the study's slug")]) -> None:
    """Print the study's owner and members with their roles."""
    from app.studies.queries import study_people

    with session_scope(load_settings()) as session:
        people = study_people(session, _study_named(session, study))
        typer.echo(f"{people.owner.username if people.owner else '(no owner)'}\towner")
        for user, role in people.members:
            typer.echo(f"{user.username}\t{role}")


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

    from app.hits.service import HitBuildError, build_hits, load_attention_items
    from app.models import StudyStatus
    from app.studies.service import get_study

    try:
        with session_scope(load_settings()) as session:
            found = get_study(session, study)
            if found is None:
                fail(f"no study {study!r}")
            if attention is not None:
                lines = attention.read_text(encoding="utf-8").splitlines()
                rows = [json.loads(line) for line in lines if line.strip()]
                typer.echo(f"added {load_attention_items(session, found, rows)} attention items")
            report = build_hits(session, found)
            if open_ and found.status is not StudyStatus.closed:
                found.status = StudyStatus.collecting
    except (HitBuildError, ValueError) as exc:
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
    from app.annotation.service import AnnotationError
    from app.studies.service import get_study

    settings = load_settings()
    try:
        with session_scope(settings) as session:
            found = get_study(session, study)
            if found is None:
                fail(f"no study {study!r}")
            made = invite(session, found, count, label)
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
    from app.annotation.service import AnnotationError
    from app.audit.service import record

    settings = load_settings()
    try:
        with session_scope(settings) as session:
            found = _study_named(session, study)
            a = find_annotator(session, found, annotator)
            (reissue_invite if reissue else revoke_invite)(session, a)
            action = "invite_reissued" if reissue else "invite_revoked"
            record(session, action, study=found, annotator=a.label or a.id, by="cli")
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


def _read_password(password: str | None) -> str:
    if password == "-":
        return sys.stdin.readline().rstrip("\n")
    if password is None:
        return typer.prompt("password", hide_input=True, confirmation_prompt=True)
    return password


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


_plugins_loaded = False


def load_plugins() -> None:
    """Commands from other packages (the worker's), found through entry points.

    `app` never imports `worker`; the worker registers `ebc worker` and
    `ebc precompute` under the `ebc.cli` entry-point group instead.
    """
    global _plugins_loaded
    if _plugins_loaded:
        return
    from importlib.metadata import entry_points

    for ep in entry_points(group="ebc.cli"):
        ep.load()(cli)
    _plugins_loaded = True


def main() -> None:
    load_plugins()
    cli()
