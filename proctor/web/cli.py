"""``proctor serve`` and ``proctor user``: run the web app, manage accounts.

Passwords never come from the command line (argv shows in ``ps`` and shell
history): they are read from an environment variable, from standard input
when it is not a terminal, or from a hidden prompt.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from proctor.core.domain import Role
from proctor.core.errors import UsageError

if TYPE_CHECKING:
    from proctor.core.db.engine import ProctorSession
    from proctor.core.settings import Settings

user_app = typer.Typer(
    rich_markup_mode=None,
    help="Accounts: create the first admin, add users, set passwords, list them, "
    "manage API tokens.",
    no_args_is_help=True,
)
token_app = typer.Typer(
    rich_markup_mode=None,
    help="API tokens: create (shown once), list, revoke.",
    no_args_is_help=True,
)
user_app.add_typer(token_app, name="token")

ADMIN_PASSWORD_ENV = "PROCTOR_ADMIN_PASSWORD"
USER_PASSWORD_ENV = "PROCTOR_USER_PASSWORD"


def _err(message: str) -> None:
    typer.echo(message, err=True)


@contextmanager
def _accounts_session(
    ctx: typer.Context, *, create: bool = False
) -> Iterator[tuple[Settings, ProctorSession]]:
    """(settings, session) for an accounts command; one transaction,
    committed when the command succeeds. ``create``: the command adds an
    account (the first thing a new installation makes), so a data folder
    with no database yet gets one; the others refuse."""
    from proctor.core.cli_context import cli_context
    from proctor.core.db.opening import command_session

    settings = cli_context(ctx).settings()
    with command_session(settings, create=create) as session:
        yield settings, session


def read_new_password(env_var: str, username: str) -> str:
    """A new password from ``env_var``, piped standard input, or a prompt."""
    from proctor.web.auth.passwords import password_problem

    if os.environ.get(env_var):
        password, source = os.environ[env_var], env_var
    elif not sys.stdin.isatty():
        password, source = sys.stdin.readline().rstrip("\r\n"), "standard input"
    else:
        password = typer.prompt(
            f"Password for {username}", hide_input=True, confirmation_prompt=True
        )
        source = "the prompt"
    problem = password_problem(password, username=username)
    if problem:
        raise UsageError(f"the password from {source} {problem}")
    return password


def _parse_roles(values: list[str] | None) -> list[Role]:
    roles = []
    for value in values or []:
        try:
            roles.append(Role(value))
        except ValueError:
            choices = ", ".join(r.value for r in Role)
            raise UsageError(f"--role: unknown role '{value}' (choose from {choices})") from None
    return roles


@user_app.command("create-admin")
def create_admin(
    ctx: typer.Context,
    username: Annotated[str, typer.Argument(help="The admin's username.")],
    display_name: Annotated[str, typer.Option(help="Full name shown on pages.")] = "",
    email: Annotated[str | None, typer.Option(help="Contact address.")] = None,
) -> None:
    """Create an admin account.

    The password comes from PROCTOR_ADMIN_PASSWORD, from standard input, or
    from a prompt; never from the command line.
    """
    _add(ctx, username, [Role.admin], display_name, email, ADMIN_PASSWORD_ENV, no_password=False)


@user_app.command("add")
def add_user(
    ctx: typer.Context,
    username: Annotated[str, typer.Argument(help="The new user's username.")],
    role: Annotated[
        list[str] | None,
        typer.Option(
            "--role",
            "-r",
            help="A role (repeat for several): admin, operator, reviewer, submitter.",
        ),
    ] = None,
    display_name: Annotated[str, typer.Option(help="Full name shown on pages.")] = "",
    email: Annotated[str | None, typer.Option(help="Contact address.")] = None,
    no_password: Annotated[
        bool, typer.Option("--no-password", help="An account that only uses API tokens.")
    ] = False,
) -> None:
    """Add a user with roles.

    The password comes from PROCTOR_USER_PASSWORD, from standard input, or
    from a prompt (or --no-password for a token-only account).
    """
    _add(ctx, username, _parse_roles(role), display_name, email, USER_PASSWORD_ENV, no_password)


def _add(
    ctx: typer.Context,
    username: str,
    roles: list[Role],
    display_name: str,
    email: str | None,
    password_env: str,
    no_password: bool,
) -> None:
    from pydantic import ValidationError

    from proctor.core.db.types import utcnow
    from proctor.web.accounts import service
    from proctor.web.accounts.schemas import UserCreate
    from proctor.web.auth.passwords import Passwords

    try:
        body = UserCreate(username=username, display_name=display_name, email=email, roles=roles)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UsageError(f"{err['loc'][0]}: {err['msg']}") from None
    with _accounts_session(ctx, create=True) as (settings, session):
        if service.get_user_by_username(session, body.username) is not None:
            raise UsageError(f"user '{body.username}' already exists")
        password = None if no_password else read_new_password(password_env, body.username)
        user = service.create_user(
            session=session,
            passwords=Passwords.for_settings(settings),
            username=body.username,
            password=password,
            roles=body.roles,
            display_name=body.display_name,
            email=body.email,
            actor=service.Actor.cli(),
            now=utcnow(),
        )
        names = ", ".join(r.value for r in service.roles_of(user)) or "no roles"
        typer.echo(f"created user '{user.username}' (id {user.id}; {names})")


@user_app.command("password")
def reset_password(
    ctx: typer.Context,
    username: Annotated[str, typer.Argument(help="Whose password.")],
) -> None:
    """Set a user's password (an admin's reset).

    The password comes from PROCTOR_USER_PASSWORD, from standard input, or
    from a prompt. Every session of the account ends and its API tokens are
    revoked, as with a reset on the admin pages. A station host's console,
    which serves no account page, has only this way to change a password.
    """
    from proctor.core.db.types import utcnow
    from proctor.web.accounts import service
    from proctor.web.auth.passwords import Passwords

    with _accounts_session(ctx) as (settings, session):
        user = service.get_user_by_username(session, username)
        if user is None:
            raise UsageError(f"no user '{username}'")
        service.set_password(
            session=session,
            passwords=Passwords.for_settings(settings),
            user=user,
            password=read_new_password(USER_PASSWORD_ENV, user.username),
            actor=service.Actor.cli(),
            now=utcnow(),
        )
        typer.echo(f"set the password of '{user.username}'; its sessions ended")


@user_app.command("list")
def list_users(ctx: typer.Context) -> None:
    """List every account with its roles and active tokens."""
    from rich.console import Console
    from rich.table import Table

    from proctor.core.db.types import utcnow
    from proctor.web.accounts import service
    from proctor.web.accounts.schemas import TokenStatus

    now = utcnow()
    with _accounts_session(ctx) as (_, session):
        table = Table("id", "username", "name", "roles", "active", "tokens", "created")
        for user in service.list_users(session):
            active_tokens = sum(
                service.token_status(t, now) == TokenStatus.active for t in user.tokens
            )
            table.add_row(
                str(user.id),
                user.username,
                user.display_name,
                ", ".join(r.value for r in service.roles_of(user)) or "—",
                "yes" if user.is_active else "no",
                str(active_tokens),
                user.created_at.strftime("%Y-%m-%d"),
            )
        Console(width=120).print(table)


@token_app.command("create")
def create_token(
    ctx: typer.Context,
    username: Annotated[str, typer.Argument(help="Whose token.")],
    name: Annotated[str, typer.Option("--name", "-n", help="What the token is for.")],
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope",
            "-s",
            help="A role the token may act in (repeat), or 'read-only'. None: identity only.",
        ),
    ] = None,
    expires_days: Annotated[
        int | None,
        typer.Option(
            min=1, max=3650, help="Days until it expires (default: web.token_expiry_days, 90)."
        ),
    ] = None,
    no_expiry: Annotated[
        bool,
        typer.Option(
            "--no-expiry",
            help="A token that never expires (revoke it yourself), e.g. for a service account. "
            "Only here: the pages and the API always set an expiry.",
        ),
    ] = False,
) -> None:
    """Create an API token (printed once).

    Only the token goes to standard output, so a script can capture it;
    store it now: only its hash is kept.
    """
    from proctor.core.db.types import utcnow
    from proctor.core.errors import FieldError
    from proctor.web.accounts import service
    from proctor.web.auth.tokens import Scope

    scopes = scope or []
    valid = {s.value for s in Scope}
    for s in scopes:
        if s not in valid:
            raise UsageError(f"--scope: unknown scope '{s}' (choose from {', '.join(valid)})")
    if no_expiry and expires_days is not None:
        raise UsageError("--no-expiry and --expires-days exclude each other")
    with _accounts_session(ctx) as (settings, session):
        user = service.get_user_by_username(session, username)
        if user is None:
            raise UsageError(f"no user '{username}'")
        if not no_expiry and expires_days is None:
            expires_days = settings.web.token_expiry_days
        try:
            row, plaintext = service.create_token(
                session=session,
                user=user,
                name=name,
                scopes=scopes,
                expires_in_days=expires_days,
                allowed_roles=service.roles_of(user),
                actor=service.Actor.cli(),
                now=utcnow(),
            )
        except FieldError as exc:
            raise UsageError(f"--{exc.field.rstrip('s')}: {exc.message}") from None
        expiry = row.expires_at.strftime("%Y-%m-%d %H:%M UTC") if row.expires_at else "never"
        _err(
            f"token {row.id} '{row.name}' for {user.username}, scopes "
            f"[{', '.join(row.scopes)}], expires {expiry}. Shown once:"
        )
        typer.echo(plaintext)


@token_app.command("list")
def list_tokens(
    ctx: typer.Context,
    username: Annotated[str | None, typer.Argument(help="Only this user's tokens.")] = None,
) -> None:
    """List API tokens (never the tokens themselves: only their prefixes)."""
    import sqlalchemy as sa
    from rich.console import Console
    from rich.table import Table

    from proctor.core.db.models import ApiToken, User
    from proctor.core.db.types import utcnow
    from proctor.web.accounts import service

    now = utcnow()
    with _accounts_session(ctx) as (_, session):
        q = sa.select(ApiToken, User.username).join(User).order_by(ApiToken.id)
        if username:
            q = q.where(User.username == username.strip().lower())
        table = Table("id", "user", "name", "prefix", "scopes", "expires", "last used", "status")
        for token, owner in session.execute(q):
            table.add_row(
                str(token.id),
                owner,
                token.name,
                token.prefix + "…",
                ", ".join(token.scopes) or "—",
                token.expires_at.strftime("%Y-%m-%d") if token.expires_at else "never",
                token.last_used_at.strftime("%Y-%m-%d %H:%M") if token.last_used_at else "never",
                service.token_status(token, now).value,
            )
        Console(width=140).print(table)


@token_app.command("revoke")
def revoke_token(
    ctx: typer.Context,
    token: Annotated[str, typer.Argument(help="The token's id or its prefix (prt_…).")],
) -> None:
    """Revoke an API token: it stops working at once."""
    from proctor.core.db.types import utcnow
    from proctor.web.accounts import service

    with _accounts_session(ctx) as (_, session):
        row = service.find_token(session, token.rstrip("…"))
        if row is None:
            raise UsageError(f"no token '{token}'")
        if row.revoked_at is not None:
            typer.echo(f"token {row.id} '{row.name}' was already revoked")
            return
        service.revoke_token(session=session, token=row, actor=service.Actor.cli(), now=utcnow())
        typer.echo(f"revoked token {row.id} '{row.name}' ({row.prefix}…)")


def serve(
    ctx: typer.Context,
    host: Annotated[
        str | None, typer.Option(help="Bind address (default: settings web.host).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Port (default: settings web.port).")
    ] = None,
    migrate_db: Annotated[
        bool | None,
        typer.Option(
            "--migrate/--no-migrate",
            help="Migrate the database first if it is behind (default: yes, except in prod).",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=64,
            help="Server processes sharing the port (default: settings web.workers, 1). "
            "Pools, request limits and caches are per process.",
        ),
    ] = None,
) -> None:
    """Serve the web app (pages and the JSON API) with uvicorn."""
    import uvicorn

    from proctor.core.cli_context import cli_context
    from proctor.core.db import migrate
    from proctor.core.db.opening import schema_state
    from proctor.web.app import create_app
    from proctor.web.templating import compile_all
    from proctor.web.uvicorn_processes import APP_FACTORY, uvicorn_config

    context = cli_context(ctx)
    settings = context.settings()
    url = settings.db_url
    state = schema_state(url)
    problem = state.problem()
    if problem:
        # serving is the one command told whether to migrate a configured
        # database (--migrate; by default outside prod); a newer one never
        do_migrate = migrate_db if migrate_db is not None else settings.env != "prod"
        if state.newer:
            raise UsageError(problem)
        if not do_migrate:
            raise UsageError(problem + " (or serve --migrate)")
        _err(f"migrating the database: {state.behind()}")
        migrate.upgrade(url)
        _err(f"database now at revision {migrate.current(url)}")
    # built here even when worker processes build their own: a setting or template
    # that cannot work fails now, once, instead of in every worker as it restarts
    app = create_app(settings)
    compile_all(app.state.web.templates)
    bind_host = host or settings.web.host
    bind_port = port or settings.web.port
    processes = workers or settings.web.workers
    _err(
        f"Proctor on http://{bind_host}:{bind_port}/ (API docs at /api/docs"
        + (f"; {processes} worker processes" if processes > 1 else "")
        + "); Ctrl-C stops it"
    )
    if processes == 1:
        server = uvicorn.Server(uvicorn_config(app, settings, host=bind_host, port=bind_port))
        server.run()
        if not server.started:  # e.g. the port is taken: uvicorn has logged why
            raise typer.Exit(code=3)
        return
    from uvicorn.supervisors import Multiprocess

    app.state.web.engine.dispose()
    if context.config_file is not None:  # the workers read the same file
        os.environ["PROCTOR_CONFIG"] = str(context.config_file.resolve())
    config = uvicorn_config(
        APP_FACTORY, settings, host=bind_host, port=bind_port, workers=processes
    )
    try:
        sock = config.bind_socket()
    except SystemExit:  # e.g. the port is taken: uvicorn has logged why
        raise typer.Exit(code=3) from None
    Multiprocess(config, sockets=[sock]).run()
