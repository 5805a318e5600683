"""``proctor import``: other benchmarks' released episodes → an interchange file.

Bad input: one ``error:`` line per problem on stderr (each naming the file
and the field), exit code 2, nothing written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from proctor.core.errors import UsageError

import_app = typer.Typer(
    rich_markup_mode=None,
    help="Convert another benchmark's released episodes (PhAIL's) into an interchange file "
    "for proctor analyze.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@import_app.command("phail")
def import_phail(
    release: Annotated[
        Path,
        typer.Argument(
            help="PhAIL's release: a Positronic dataset folder, or a folder of them "
            "(v1.0/dataset/ holds rollouts/, human/, teleoperation/)."
        ),
    ],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="The interchange file to write (.csv or .jsonl)."),
    ],
    annotations: Annotated[
        Path | None,
        typer.Option(
            help="JSON Lines of placement times and lost/dropped counts, one object an "
            'episode: {"uid", "placements_s", "lost", "dropped"}. Without it they are read '
            "from each episode's static items proctor.placements_s, proctor.lost, "
            "proctor.dropped (docs/methods.md, Importing PhAIL's release).",
        ),
    ] = None,
    reference: Annotated[
        str,
        typer.Option(
            help="The model whose episodes are the human reference ('' for none).",
        ),
    ] = "teleop",
    all_objects: Annotated[
        bool,
        typer.Option(
            "--all-objects",
            help="Keep every object, not only PhAIL's four trained ones (Towels, "
            "Wooden spoons, Scissors, Batteries).",
        ),
    ] = False,
) -> None:
    """Convert PhAIL's released episodes (Positronic's dataset layout) into an
    interchange file that `proctor analyze` scores."""
    from proctor.analysis.importers import InvalidRelease
    from proctor.analysis.importers.phail import (
        TRAINED_OBJECTS,
        AnnotationSource,
        FileAnnotations,
        StaticAnnotations,
        import_release,
    )
    from proctor.analysis.interchange import write_interchange

    if not out.parent.is_dir():
        raise UsageError(f"--out: the folder {out.parent} does not exist")
    source: AnnotationSource = (
        StaticAnnotations() if annotations is None else FileAnnotations(annotations)
    )
    try:
        result = import_release(
            release,
            source,
            reference=reference or None,
            objects=None if all_objects else TRAINED_OBJECTS,
        )
    except InvalidRelease as exc:
        for line in exc.lines:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(code=2) from None
    write_interchange(result.episodes, out)
    for note in result.notes:
        typer.echo(note)
    typer.echo(f"wrote {out}; score it with: proctor analyze {out}")
