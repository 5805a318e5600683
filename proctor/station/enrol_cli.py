"""``proctor station enrol`` and ``proctor station token``: an admin's
commands on the server, issuing stations their credentials
(``proctor.core.station_credentials``).

Each is one transaction on the configured database, audited under
``cli:<login name>``. A token is printed once, on stdout alone (the
explanation goes to stderr), so that ``… > token`` captures nothing else;
the database keeps only its hash.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from proctor.core.errors import UsageError

if TYPE_CHECKING:
    from proctor.core.audit import Actor
    from proctor.core.db.engine import ProctorSession
    from proctor.core.station_credentials import IssuedToken

token_app = typer.Typer(
    rich_markup_mode=None,
    help="A station's tokens: rotate (without downtime), revoke, list.",
    no_args_is_help=True,
)

NameArg = Annotated[str, typer.Argument(help="The station's name (its config's `name`).")]


@contextmanager
def _session(ctx: typer.Context, *, create: bool = False) -> Iterator[ProctorSession]:
    """The command's one transaction; ``create``: it makes something (enrolling a
    station), so a data folder with no database yet gets one."""
    from proctor.core.cli_context import cli_context
    from proctor.core.db.opening import command_session

    with command_session(cli_context(ctx).settings(), create=create) as session:
        yield session


def _actor() -> Actor:
    from proctor.core.audit import Actor

    try:
        who = getpass.getuser()
    except (KeyError, OSError):  # no login name in a bare container
        who = "unknown"
    return Actor(label=f"cli:{who}")


def _show(issued: IssuedToken, what: str) -> None:
    from proctor.core.station_credentials import TOKEN_ENV

    typer.echo(
        f"station '{issued.station_name}': {what} (prefix {issued.prefix}). Shown once: put it "
        f"in the station host's environment file as {TOKEN_ENV}=…, never in a config file.",
        err=True,
    )
    typer.echo(issued.token)


def enrol(
    ctx: typer.Context,
    name: NameArg,
    profile: Annotated[
        str, typer.Option("--profile", help="Station profile: sim, twin or real.")
    ] = "real",
) -> None:
    """Enrol a station: register it (or take its row) and issue its token."""
    from proctor.core import station_credentials
    from proctor.station.profiles import PROFILES

    if profile not in PROFILES.names():
        raise UsageError(f"--profile: '{profile}' is not one of {', '.join(PROFILES.names())}")
    with _session(ctx, create=True) as session:
        issued = station_credentials.enrol(session, name=name, profile=profile, actor=_actor())
    _show(issued, "enrolled")


@token_app.command()
def rotate(
    ctx: typer.Context,
    name: NameArg,
    window_hours: Annotated[
        float,
        typer.Option(
            "--window-hours",
            min=0,
            help="How long the station's current tokens stay valid beside the new one.",
        ),
    ] = 24.0,
) -> None:
    """Issue a new token; the old ones stay valid for the window, then expire."""
    from proctor.core import station_credentials

    with _session(ctx) as session:
        issued = station_credentials.rotate(
            session, name=name, window=timedelta(hours=window_hours), actor=_actor()
        )
    ends = issued.old_tokens_expire_at
    _show(issued, f"new token; the previous ones stop at {ends:%Y-%m-%d %H:%M:%S} UTC")


@token_app.command()
def revoke(
    ctx: typer.Context,
    name: NameArg,
    prefix: Annotated[
        str | None,
        typer.Option(help="Only the token with this prefix (see `token list`); default: all."),
    ] = None,
) -> None:
    """Revoke the station's tokens now: its next connection is refused."""
    from proctor.core import station_credentials

    with _session(ctx) as session:
        revoked = station_credentials.revoke(session, name=name, prefix=prefix, actor=_actor())
    typer.echo(f"station '{name}': revoked {', '.join(revoked)}")


@token_app.command("list")
def list_(ctx: typer.Context, name: NameArg) -> None:
    """The station's tokens (prefixes and dates, never the tokens)."""
    from proctor.core import station_credentials

    with _session(ctx) as session:
        tokens = station_credentials.tokens_of(session, name=name)
    for t in tokens:
        if t.revoked_at is not None:
            state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}"
        elif not t.live:
            state = "expired"
        elif t.expires_at is not None:
            state = f"valid until {t.expires_at:%Y-%m-%d %H:%M}"
        else:
            state = "valid"
        used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never"
        typer.echo(f"{t.prefix}  created {t.created_at:%Y-%m-%d %H:%M}  {state}  last used {used}")
    if not tokens:
        typer.echo(f"station '{name}' has no tokens (enrol it: proctor station enrol {name})")
