"""``proctor console photo add|list``: reference photos of initial scenes.

A real cell cannot render the scene it is about to run, so the operator
console shows a photo registered here instead (``proctor/web/console/photos.py``
says how one is chosen).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from proctor.core.domain import Side

console_app = typer.Typer(
    rich_markup_mode=None,
    help="The operator console: reference photos of initial scenes.",
    no_args_is_help=True,
)
photo_app = typer.Typer(
    rich_markup_mode=None, help="Reference photos: add one, list them.", no_args_is_help=True
)
console_app.add_typer(photo_app, name="photo")


@photo_app.command("add")
def add_photo(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A JPEG, PNG or WebP file.")],
    object_name: Annotated[str, typer.Option("--object", help="Object type, e.g. spoons.")],
    tote: Annotated[
        Side | None, typer.Option(help="Target tote side it shows (default: any).")
    ] = None,
    camera_side: Annotated[
        Side | None, typer.Option(help="Exterior camera side it shows (default: any).")
    ] = None,
    camera: Annotated[
        str | None, typer.Option(help="The camera it stands in for (default: any).")
    ] = None,
) -> None:
    """Store a photo of an initial scene for the console to show."""
    from proctor.core.artifacts import open_store
    from proctor.core.cli_context import cli_context
    from proctor.core.db.opening import command_session
    from proctor.web.console.photos import register_photo

    settings = cli_context(ctx).settings()
    with command_session(settings) as session:
        row = register_photo(
            session,
            store=open_store(settings.artifacts_location),
            path=path,
            object_name=object_name,
            tote_side=tote,
            camera_side=camera_side,
            camera=camera,
        )
        sides = f"tote {tote.value if tote else 'any'}, camera " + (
            camera_side.value if camera_side else "any"
        )
        typer.echo(f"photo {row.sha256[:12]} registered for {object_name}, {sides}")


@photo_app.command("list")
def list_photos(ctx: typer.Context) -> None:
    """The registered reference photos, newest first."""
    import sqlalchemy as sa
    from rich.console import Console
    from rich.table import Table

    from proctor.core.cli_context import cli_context
    from proctor.core.db.models import Artifact
    from proctor.core.db.opening import command_session
    from proctor.core.domain import ArtifactKind

    settings = cli_context(ctx).settings()
    with command_session(settings) as session:
        rows = session.scalars(
            sa.select(Artifact)
            .where(Artifact.kind == ArtifactKind.photo, Artifact.episode_id.is_(None))
            .order_by(Artifact.id.desc())
        ).all()
        table = Table("sha256", "object", "tote", "camera side", "camera", "registered")
        for r in rows:
            d = r.details or {}
            table.add_row(
                r.sha256[:12],
                str(d.get("object", "")),
                str(d.get("tote_side", "any")),
                str(d.get("camera_side", "any")),
                r.camera or "any",
                r.created_at.strftime("%Y-%m-%d %H:%M") if r.created_at else "",
            )
    Console().print(table if rows else "no reference photos registered")
