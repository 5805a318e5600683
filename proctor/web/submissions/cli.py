"""``proctor submission``: conformance workers and upload housekeeping."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

submission_app = typer.Typer(
    help="Submissions: run queued conformance checks, clean abandoned uploads.",
    no_args_is_help=True,
)


def _open(ctx: typer.Context) -> tuple[Any, Any]:
    from proctor.core.cli_context import cli_context
    from proctor.core.db.opening import open_sessions

    settings = cli_context(ctx).settings()
    return settings, open_sessions(settings)


def _echo(outcome: Any) -> None:
    typer.echo(
        f"run {outcome.run_id} (submission {outcome.submission_id}): {outcome.verdict} — "
        f"{outcome.summary}"
    )


@submission_app.command("work")
def work(
    ctx: typer.Context,
    run_id: Annotated[
        int | None, typer.Argument(help="The queued run to take first (default: the oldest).")
    ] = None,
    drain: Annotated[
        bool, typer.Option("--drain/--no-drain", help="Then take every other queued run.")
    ] = True,
) -> None:
    """Run queued conformance checks, then exit (what the web server spawns)."""
    from proctor.web.submissions.worker import work as run_work

    settings, sessions = _open(ctx)
    outcomes = run_work(sessions, settings, run_id=run_id, drain=drain, on_outcome=_echo)
    if not outcomes:
        typer.echo("nothing queued")


@submission_app.command("worker")
def worker(
    ctx: typer.Context,
    poll: Annotated[float, typer.Option(min=0.5, help="Seconds between looks at the queue.")] = 5.0,
) -> None:
    """Run conformance checks as they are queued, until interrupted (for
    ``submissions.conformance_dispatch = "worker"``)."""
    from proctor.web.submissions.worker import work as run_work

    settings, sessions = _open(ctx)
    typer.echo(f"conformance worker: looking at the queue every {poll:g} s")
    while True:
        run_work(sessions, settings, drain=True, on_outcome=_echo)
        time.sleep(poll)


@submission_app.command("clean-uploads")
def clean_uploads(ctx: typer.Context) -> None:
    """Delete abandoned uploads (past their expiry) and stray staged files."""
    from proctor.core.db import session_scope
    from proctor.core.db.types import utcnow
    from proctor.web.submissions.uploads import expire_uploads

    settings, sessions = _open(ctx)
    with session_scope(sessions) as session:
        n = expire_uploads(session, settings=settings, now=utcnow())
    typer.echo(f"removed {n} abandoned upload{'s' if n != 1 else ''}")
