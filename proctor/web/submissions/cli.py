"""``proctor submission``: conformance workers, upload housekeeping, and the
admin's registration of the human reference (the teleop server each station
host serves itself)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

submission_app = typer.Typer(
    rich_markup_mode=None,
    help="Submissions: run queued conformance checks, clean abandoned uploads, "
    "register the human reference.",
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
    handed: Annotated[
        str | None,
        typer.Option(help="RUN_ID was claimed for this process under this token (the web app's)."),
    ] = None,
) -> None:
    """Run queued conformance checks within the caps, then exit (what the web server spawns)."""
    from proctor.web.submissions.worker import work as run_work

    settings, sessions = _open(ctx)
    outcomes = run_work(
        sessions, settings, run_id=run_id, handed=handed, drain=drain, on_outcome=_echo
    )
    if not outcomes:
        typer.echo("nothing queued")


@submission_app.command("worker")
def worker(
    ctx: typer.Context,
    poll: Annotated[float, typer.Option(min=0.5, help="Seconds between looks at the queue.")] = 5.0,
) -> None:
    """Run conformance checks as they are queued, until interrupted (for
    ``submissions.conformance_dispatch = "worker"``): one process running at
    most ``submissions.max_concurrent_checks`` checks at once, one per thread
    (the caps are claimed in the database, so several such workers together
    still run no more)."""
    import threading

    from proctor.web.submissions.worker import work as run_work

    settings, sessions = _open(ctx)
    lanes = settings.submissions.max_concurrent_checks
    typer.echo(
        f"conformance worker: at most {lanes} check{'s' if lanes != 1 else ''} at once, "
        f"looking at the queue every {poll:g} s"
    )

    def lane() -> None:
        while True:
            try:
                run_work(sessions, settings, drain=True, on_outcome=_echo)
            except Exception as exc:  # the database went away for a moment: try again
                typer.echo(f"conformance worker: {type(exc).__name__}: {exc}", err=True)
            time.sleep(poll)

    threads = [
        threading.Thread(target=lane, name=f"conformance-{n}", daemon=True) for n in range(lanes)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


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


@submission_app.command("reference")
def reference(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The reference's name, e.g. human-teleop.")],
    url: Annotated[
        str,
        typer.Option(
            help="Where each station host serves `proctor station teleop` (loopback, ws://)."
        ),
    ] = "ws://127.0.0.1:8010",
    description: Annotated[str, typer.Option(help="A line for the admins.")] = "",
) -> None:
    """Register the human reference (admins): the teleop server each station host
    serves on its own loopback. Stations connect to it directly; the gateway and
    the conformance worker never do. Name it under `reference` in a campaign."""
    from proctor.core.audit import Actor
    from proctor.core.db import session_scope
    from proctor.core.db.types import utcnow
    from proctor.web.submissions.reference import register_teleop_reference

    _, sessions = _open(ctx)
    with session_scope(sessions) as session:
        sub = register_teleop_reference(
            session, name=name, url=url, description=description, actor=Actor.cli(), now=utcnow()
        )
        sid, stored = sub.id, sub.endpoint_url
    typer.echo(
        f"human reference '{name}': submission {sid}; each station connects to {stored} "
        "on its own host (run `proctor station teleop` there)"
    )
