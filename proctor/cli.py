"""The ``proctor`` command.

Each service owns its commands in its own ``cli.py``; this module only
assembles them, parses the global options, and turns failures into one clear
line and a non-zero exit (a traceback only with ``--debug``).

A service's ``cli.py`` is imported only when one of its commands runs
(``SERVICE_COMMANDS``): importing them all pulled in SQLAlchemy, FastAPI and
the station (about 0.3 s on a quiet machine, 1 s on a loaded one) to print a
version. ``proctor --help`` lists every command from the one-line help kept
here; ``tests/proctor/test_cli.py`` checks it against each command's own.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import click
import typer
from typer.core import TyperGroup

from proctor.core.cli_context import CliContext
from proctor.core.errors import ProctorError


class ServiceCommand(NamedTuple):
    """A command (or group) owned by a service's ``cli.py``: where it lives,
    whether it is a Typer app (a group) or a function, and its one-line help
    for ``proctor --help``."""

    module: str
    attribute: str
    group: bool
    help: str


# in the order --help lists them (commands, then groups, as Typer does)
SERVICE_COMMANDS: dict[str, ServiceCommand] = {
    "demo": ServiceCommand(
        "proctor.demo_cli",
        "demo",
        False,
        "Run a blinded campaign on the simulated cell, annotate it, score it, serve it.",
    ),
    "serve": ServiceCommand(
        "proctor.web.cli",
        "serve",
        False,
        "Serve the web app (pages and the JSON API) with uvicorn.",
    ),
    "analyze": ServiceCommand(
        "proctor.analysis.cli",
        "analyze",
        False,
        "Score policies from an interchange file: time-to-success CDFs, HRT, RMST, "
        "macro-KS verdicts (docs/methods.md).",
    ),
    "power": ServiceCommand(
        "proctor.analysis.cli",
        "power_app",
        True,
        "How many episodes per cell a pair needs (bridge model), the empirical detection "
        "rate vs n, null calibration, and the Wilson / Connor formulas.",
    ),
    "import": ServiceCommand(
        "proctor.analysis.importers.cli",
        "import_app",
        True,
        "Convert another benchmark's released episodes (PhAIL's) into an interchange file "
        "for proctor analyze.",
    ),
    "annotate": ServiceCommand(
        "proctor.annotator.cli",
        "annotate",
        False,
        "Detect placements in recorded telemetry and reconcile them with the operator's count.",
    ),
    "export": ServiceCommand(
        "proctor.export_cli",
        "export",
        False,
        "Write a released campaign for the public (or a submitter's own episodes) as a dataset.",
    ),
    "calibrate": ServiceCommand(
        "proctor.calibrate_cli",
        "calibrate",
        False,
        "Re-calibrate the annotator's thresholds on simulated episodes (thresholds.toml).",
    ),
    "db": ServiceCommand(
        "proctor.db_cli",
        "db_app",
        True,
        "Database schema: upgrade, downgrade, show the current revision.",
    ),
    "station": ServiceCommand("proctor.station.cli", "station_app", True, "The station daemon."),
    "policy": ServiceCommand(
        "proctor.policywire.cli",
        "policy_app",
        True,
        "Policy servers: demo policies, conformance checks.",
    ),
    "campaign": ServiceCommand(
        "proctor.scheduler.cli",
        "campaign_app",
        True,
        "Campaigns: create, start, status, close, reveal, unblind, release.",
    ),
    "user": ServiceCommand(
        "proctor.web.cli",
        "user_app",
        True,
        "Accounts: create the first admin, add users, set passwords, list them, manage API tokens.",
    ),
    "console": ServiceCommand(
        "proctor.web.console.cli",
        "console_app",
        True,
        "The operator console: reference photos of initial scenes.",
    ),
    "submission": ServiceCommand(
        "proctor.web.submissions.cli",
        "submission_app",
        True,
        "Submissions: run queued conformance checks, clean abandoned uploads, "
        "register the human reference.",
    ),
    "runner": ServiceCommand(
        "proctor.runner.cli",
        "runner_app",
        True,
        "Checkpoint runners: serve uploaded checkpoints sandboxed (the runner host), "
        "or try one archive exactly as the host would run it.",
    ),
}


def load_service_command(name: str) -> click.Command:
    """Import the service that owns ``name`` and build its click command."""
    spec = SERVICE_COMMANDS[name]
    target = getattr(importlib.import_module(spec.module), spec.attribute)
    if spec.group:
        cmd: click.Command = typer.main.get_group(target)
    else:
        single = typer.Typer(
            rich_markup_mode=None, add_completion=False, pretty_exceptions_enable=False
        )
        single.command(name)(target)
        cmd = typer.main.get_command(single)
    cmd.name = name
    return cmd


class _LazyGroup(TyperGroup):
    """The root group: service commands are built on first use."""

    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        eager = [n for n in super().list_commands(ctx) if n not in SERVICE_COMMANDS]
        return [*eager, *SERVICE_COMMANDS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None or cmd_name not in SERVICE_COMMANDS:
            return found
        if self._listing:
            # the root's --help needs a name and a line, not the service
            spec = SERVICE_COMMANDS[cmd_name]
            return click.Command(cmd_name, help=spec.help, short_help=spec.help)
        cmd = load_service_command(cmd_name)
        self.add_command(cmd, cmd_name)
        return cmd

    def format_help(self, ctx: click.Context, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    rich_markup_mode=None,
    cls=_LazyGroup,
    name="proctor",
    help="Blinded, statistically honest evaluation of robot policies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar="PROCTOR_CONFIG",
            help="TOML config file (environment variables PROCTOR_* override it).",
        ),
    ] = None,
) -> None:
    ctx.obj = CliContext(debug=debug, config_file=config)


@app.command()
def version() -> None:
    """Print the installed version."""
    from proctor import __version__

    typer.echo(f"proctor {__version__}")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args or os.environ.get("PROCTOR_DEBUG") == "1"
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="proctor", standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except ProctorError as exc:
        if debug:
            raise
        typer.echo(f"error: {one_line(exc)}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        if _is_usage_error(exc):
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        if debug:
            raise
        typer.echo(
            f"error: unexpected failure: {type(exc).__name__}: {one_line(exc)} "
            "(run with --debug for the traceback)",
            err=True,
        )
        sys.exit(1)
    sys.exit(result if isinstance(result, int) else 0)


def _is_usage_error(exc: Exception) -> bool:
    # typer vendors its own click, so match click's exception protocol rather
    # than a class: a usage error knows how to show itself and its exit code
    return callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line, without SQLAlchemy's link footer."""
    text = str(exc).split("(Background on this error at:")[0]
    return " ".join(text.split())
