"""``proctor annotate``: run the release detector over closed episodes.

    proctor annotate --episode UID       # one episode
    proctor annotate --all-pending       # every closed, logged, unannotated episode
    proctor annotate ... --propose-failures   # also tag evident failure modes

With ``--propose-failures`` the telemetry proposer (``proctor.annotator.autopropose``)
tags each annotated episode's evident failures (a grasp that closed on
nothing, an item lost in transit, a stall) as labelled review records, in
the same transaction.

Each episode is annotated in its own transaction, so an interrupted run
keeps what it finished and a failing recording does not hold back the
rest (failures are listed and the exit code is 1).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from proctor.core.errors import ProctorError, UsageError


def _console() -> Any:
    from rich.console import Console

    console = Console(highlight=False)
    return console if console.is_terminal else Console(highlight=False, width=160)


def annotate(
    ctx: typer.Context,
    episode: Annotated[
        str | None, typer.Option("--episode", help="Annotate this episode (its uid).")
    ] = None,
    all_pending: Annotated[
        bool,
        typer.Option("--all-pending", help="Annotate every closed episode not yet annotated."),
    ] = False,
    thresholds: Annotated[
        Path | None,
        typer.Option(
            "--thresholds",
            help="Thresholds file (default: the calibrated proctor/annotator/thresholds.toml).",
        ),
    ] = None,
    propose_failures: Annotated[
        bool,
        typer.Option(
            "--propose-failures",
            help="Also tag the failure modes telemetry makes evident (labelled review records).",
        ),
    ] = False,
) -> None:
    """Detect placements in recorded telemetry and reconcile them with the operator's count."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from proctor.annotator.autopropose import propose_episode
    from proctor.annotator.config import load_thresholds
    from proctor.annotator.reconcile import (
        annotate_episode,
        check_annotatable,
        find_episode,
        pending_episodes,
    )
    from proctor.core.artifacts import open_store
    from proctor.core.cli_context import cli_context
    from proctor.core.db.engine import session_scope
    from proctor.core.db.opening import command_sessions

    if (episode is None) == (not all_pending):
        raise UsageError("give either --episode UID or --all-pending")
    th = load_thresholds(thresholds)
    settings = cli_context(ctx).settings()
    console = _console()
    with command_sessions(settings) as sessions:
        store = open_store(settings.artifacts_location)
        with session_scope(sessions) as s:
            if episode is not None:
                ep = find_episode(s, episode)
                check_annotatable(ep)
                uids = [ep.uid]
            else:
                uids = [e.uid for e in pending_episodes(s)]
        if not uids:
            console.print("nothing to annotate: no closed, logged episode is pending")
            return
        counts: Counter[str] = Counter()
        failures: list[str] = []
        columns = (
            TextColumn("annotating"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"),
        )
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("annotate", total=len(uids), last="")
            for uid in uids:
                try:
                    with session_scope(sessions) as s:
                        result = annotate_episode(
                            s, store=store, episode=find_episode(s, uid), thresholds=th
                        )
                        if propose_failures:
                            counts["proposed"] += len(
                                propose_episode(s, store=store, uid=uid, thresholds=th)
                            )
                    counts[result.label_status.value] += 1
                    last = f"{uid}: {result.label_status.value}"
                except ProctorError as exc:
                    if episode is not None:
                        raise
                    failures.append(f"{uid}: {exc}")
                    counts["failed"] += 1
                    last = f"{uid}: failed"
                progress.update(task, advance=1, last=last)
        table = Table(title=f"annotated with thresholds {th.version}")
        table.add_column("label status")
        table.add_column("episodes", justify="right")
        for key, label in (
            ("auto", "auto (detector agrees with the operator)"),
            ("needs_review", "needs review (queued for a reviewer)"),
            ("failed", "failed"),
            *((("proposed", "failure-mode tags proposed"),) if propose_failures else ()),
        ):
            table.add_row(label, str(counts.get(key, 0)))
        console.print(table)
        for line in failures:
            console.print(f"[red]failed[/red] {line}")
        if failures:
            raise ProctorError(f"{len(failures)} of {len(uids)} episode(s) could not be annotated")
