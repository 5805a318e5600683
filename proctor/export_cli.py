"""``proctor export``: a released campaign as a dataset (layout in
``proctor.export``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from proctor.core.domain import LabelStream


def export(
    ctx: typer.Context,
    campaign: Annotated[str, typer.Argument(help="The campaign's name or id (released).")],
    out: Annotated[Path, typer.Argument(help="A new (or empty) folder to write.")],
    stream: Annotated[
        LabelStream,
        typer.Option(help="Which placement times the interchange file carries."),
    ] = LabelStream.auto_and_reviewed,
    media: Annotated[
        bool, typer.Option("--media/--no-media", help="Include the MP4 videos (large).")
    ] = True,
) -> None:
    """Write the interchange file plus per-episode video, telemetry and annotations."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from proctor.core.artifacts import open_store
    from proctor.core.cli_context import cli_context
    from proctor.core.db.opening import command_session
    from proctor.export.dataset import export_campaign

    settings = cli_context(ctx).settings()
    with (
        command_session(settings) as session,
        Progress(TextColumn("exporting"), BarColumn(), MofNCompleteColumn()) as bar,
    ):
        task = bar.add_task("export", total=None)
        summary = export_campaign(
            session,
            open_store(settings.artifacts_location),
            campaign=campaign,
            out=out,
            stream=stream,
            media=media,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    typer.echo(
        f"{summary.folder}: {summary.episodes} episodes, {summary.files} files, "
        f"{summary.bytes / 1e6:.1f} MB (dataset.json lists each file's sha256)"
    )
