"""``proctor demo``: the whole pipeline on the embedded defaults (see
``proctor.demo``)."""

from __future__ import annotations

from typing import Annotated

import typer


def demo(
    ctx: typer.Context,
    episodes: Annotated[
        int,
        typer.Option(
            "--episodes",
            min=1,
            max=200,
            help="Episodes per (policy, object) cell. The default gives a leaderboard with "
            "resolved, crossing and unresolved pairs in a few minutes on two cores.",
        ),
    ] = 6,
    seed: Annotated[
        int,
        typer.Option(
            help="Seeds the allocation (derived, not secret: a demo), the simulated scenes "
            "and the demo policies."
        ),
    ] = 1,
    stations: Annotated[
        int,
        typer.Option(min=1, max=8, help="Simulated stations claiming runs in parallel."),
    ] = 2,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve/--no-serve",
            help="Serve the site when done (default), or exit after printing the leaderboard.",
        ),
    ] = True,
    port: Annotated[
        int | None,
        typer.Option(min=1, max=65535, help="Port for the site (default: settings web.port)."),
    ] = None,
) -> None:
    """Run a blinded campaign on the simulated cell, annotate it, score it, serve it."""
    from rich.console import Console

    from proctor.core.cli_context import cli_context
    from proctor.demo.run import DemoOptions, run_demo

    settings = cli_context(ctx).settings()
    run_demo(
        settings,
        DemoOptions(
            episodes_per_cell=episodes,
            seed=seed,
            stations=stations,
            serve=serve,
            host=settings.web.host,
            port=port or settings.web.port,
        ),
        Console(),
    )
