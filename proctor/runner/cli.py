"""``proctor runner``: the inference host's worker, and serving one checkpoint
as the host would (``proctor runner serve``)."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

runner_app = typer.Typer(
    rich_markup_mode=None,
    help="Checkpoint runners: serve uploaded checkpoints sandboxed (the runner host), "
    "or try one archive exactly as the host would run it.",
    no_args_is_help=True,
)


def _settings(ctx: typer.Context) -> Any:
    from proctor.core.cli_context import cli_context

    return cli_context(ctx).settings()


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


@runner_app.command("worker")
def worker(
    ctx: typer.Context,
    host: Annotated[
        str | None, typer.Option(help="This host's name in the admin view (default: hostname).")
    ] = None,
) -> None:
    """Claim runner jobs from the database and serve them until interrupted.
    Any number of runner hosts may serve one database."""
    from proctor.core.artifacts import open_store
    from proctor.core.db.opening import open_sessions
    from proctor.runner.worker import RunnerWorker, WorkerConfig

    settings = _settings(ctx)
    config = WorkerConfig.from_settings(settings, host=host)
    worker = RunnerWorker(
        open_sessions(settings),
        open_store(settings.artifacts_location),
        config,
    )
    typer.echo(
        f"runner worker {worker.name}: environments in {config.env_dir}, "
        f"work in {config.pipeline.work_dir}, relays on {config.bind_host}"
    )
    worker.run(_stop_on_signals())


@runner_app.command("serve")
def serve(
    ctx: typer.Context,
    path: Annotated[
        Path,
        typer.Argument(
            exists=True, help="A checkpoint archive, or a folder with policy.toml at its top."
        ),
    ],
    port: Annotated[int, typer.Option(min=1, max=65535, help="Serve on 127.0.0.1:PORT.")] = 8000,
    report: Annotated[
        Path | None, typer.Option(help="Write how it ended (reason, diagnostics) as JSON here.")
    ] = None,
) -> None:
    """Serve a checkpoint exactly as the runner host would — same environment,
    sandbox and limits — on 127.0.0.1:PORT, printing each stage."""
    from proctor.runner.envs import EnvStore
    from proctor.runner.pipeline import private_dir
    from proctor.runner.serve import serve_checkpoint
    from proctor.runner.worker import WorkerConfig

    settings = _settings(ctx)
    config = WorkerConfig.from_settings(settings)
    pipeline = config.pipeline
    private_dir(pipeline.work_dir)
    result = serve_checkpoint(
        path,
        port=port,
        config=pipeline,
        envs=EnvStore(config.env_dir, build_timeout_s=config.build_timeout_s),
        say=typer.echo,
        stop=_stop_on_signals(),
        latency_budget_s=settings.runner.latency_budget_s,
    )
    if report is not None:
        report.write_text(json.dumps(result.__dict__, indent=2, default=str))
    if result.failure is None:
        typer.echo("stopped")
        return
    typer.echo(f"failed: {result.failure} ({result.fault}'s fault): {result.message}", err=True)
    tail = result.diagnostics.get("output_tail")
    for line in tail if isinstance(tail, list) else []:
        typer.echo(f"  | {line}", err=True)
    raise typer.Exit(1)
