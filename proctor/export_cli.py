"""``proctor export``: a campaign as a dataset (layouts in ``proctor.export``
and ``proctor.export.lerobot``; who may export what in ``proctor.export.audience``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from proctor.core.domain import LabelStream
from proctor.export.formats import ExportFormat


def export(
    ctx: typer.Context,
    campaign: Annotated[str, typer.Argument(help="The campaign's name or id.")],
    out: Annotated[Path, typer.Argument(help="A new (or empty) folder to write.")],
    stream: Annotated[
        LabelStream,
        typer.Option(help="Which placement times the interchange file carries."),
    ] = LabelStream.auto_and_reviewed,
    media: Annotated[
        bool, typer.Option("--media/--no-media", help="Include the MP4 videos (large).")
    ] = True,
    fmt: Annotated[
        ExportFormat,
        typer.Option(
            "--format", help="proctor: interchange file + recordings; lerobot: LeRobot v3."
        ),
    ] = ExportFormat.proctor,
    submitter: Annotated[
        str | None,
        typer.Option(
            help="Export for this submitter: their own policies' episodes only, "
            "before release too (private; --format lerobot)."
        ),
    ] = None,
    policy: Annotated[
        str | None, typer.Option(help="With --submitter: only this one of their policies.")
    ] = None,
    reencode: Annotated[
        bool,
        typer.Option(
            "--reencode",
            help="LeRobot: decode and re-encode every video (by default a recording whose "
            "frames are exactly the dataset's is copied as it is, bit for bit).",
        ),
    ] = False,
) -> None:
    """Write a released campaign for the public (or a submitter's own episodes) as a dataset."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from proctor.core.artifacts import open_store
    from proctor.core.cli_context import cli_context
    from proctor.core.db.opening import command_session
    from proctor.export.formats import EXPORTERS, ExportRequest

    settings = cli_context(ctx).settings()
    with (
        command_session(settings) as session,
        Progress(
            TextColumn("exporting"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("episodes"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
        ) as bar,
    ):
        task = bar.add_task("export", total=None)
        request = ExportRequest(
            campaign=campaign,
            out=out,
            stream=stream,
            media=media,
            submitter=submitter,
            policy=policy,
            reencode=reencode,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
        summary = EXPORTERS[fmt](session, open_store(settings.artifacts_location), request)
    typer.echo(
        f"{summary.folder}: {summary.episodes} episodes, {summary.files} files, "
        f"{summary.bytes / 1e6:.1f} MB"
    )
