"""`ebc admin`: researcher accounts and API tokens, through the dashboard's services (so the
same rules hold and the audit log shows what the CLI did)."""

from __future__ import annotations

from typing import Annotated

import typer

from app.audit.service import CLI
from app.cli.common import fail, load_settings, read_password, session_scope, user_named

admin_cli = typer.Typer(help="Researcher accounts and API tokens.")


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

    password = read_password(password)
    settings = load_settings()
    try:
        with session_scope(settings) as session:
            _create(session, username, password, is_admin=admin, by=CLI)
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

    password = read_password(password)
    try:
        with session_scope(load_settings()) as session:
            _set(session, user_named(session, username), password, by=CLI)
    except AuthError as exc:
        fail(str(exc))
    typer.echo(f"password set for {username}")


@admin_cli.command("create-token")
def create_token(
    username: str, name: Annotated[str, typer.Option(help="what the token is for")] = "cli"
) -> None:
    """Create an API token for USERNAME; it is printed once."""
    from app.auth.service import create_api_token

    with session_scope(load_settings()) as session:
        new = create_api_token(session, user_named(session, username), name, by=CLI)
    typer.echo(new.secret)


@admin_cli.command("revoke-token")
def revoke_token(prefix: Annotated[str, typer.Argument(help="the token's first 12 characters")]):
    """Revoke the API token that starts with PREFIX."""
    from app.auth.service import revoke_api_token, tokens_by_prefix

    with session_scope(load_settings()) as session:
        tokens = tokens_by_prefix(session, prefix)
        if len(tokens) != 1:
            fail(f"{len(tokens)} tokens start with {prefix!r}; give the 12-character prefix")
        revoke_api_token(session, tokens[0], by=CLI)
    typer.echo(f"revoked {prefix[:12]}…")
