"""The ``proctor`` command.

Each service owns its commands in its own ``cli.py``; this module only
assembles them, parses the global options, and turns failures into one clear
line and a non-zero exit (a traceback only with ``--debug``).
Heavy imports happen inside commands so that ``proctor --help`` is instant.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from proctor.errors import ProctorError
from proctor.settings import Settings, load_settings

app = typer.Typer(
    name="proctor",
    help="Blinded, statistically honest evaluation of robot policies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@dataclass
class CliContext:
    debug: bool
    config_file: Path | None

    def settings(self) -> Settings:
        return load_settings(self.config_file)


def cli_context(ctx: typer.Context) -> CliContext:
    obj = ctx.find_root().obj
    if isinstance(obj, CliContext):
        return obj
    return CliContext(debug=False, config_file=None)


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


def _register_services() -> None:
    # imported here, not at the top, to keep the assembly order explicit
    from analysis import cli as analysis_cli
    from annotator import cli as annotator_cli
    from proctor import db_cli, demo_cli, export_cli
    from scheduler import cli as scheduler_cli
    from station import cli as station_cli
    from web import cli as web_cli
    from web.console import cli as console_cli
    from web.submissions import cli as submissions_cli

    app.add_typer(db_cli.db_app, name="db")
    app.command("demo")(demo_cli.demo)
    app.command("serve")(web_cli.serve)
    app.add_typer(station_cli.station_app, name="station")
    app.add_typer(station_cli.policy_app, name="policy")
    app.command("analyze")(analysis_cli.analyze)
    app.command("power")(analysis_cli.power)
    app.command("annotate")(annotator_cli.annotate)
    app.add_typer(scheduler_cli.campaign_app, name="campaign")
    app.add_typer(web_cli.user_app, name="user")
    app.add_typer(console_cli.console_app, name="console")
    app.add_typer(submissions_cli.submission_app, name="submission")
    app.command("export")(export_cli.export)


_register_services()


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
