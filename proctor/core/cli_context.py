"""What every command of the ``proctor`` CLI shares: the global options
(``--debug``, ``--config``) and the settings they select.

It lives in the kernel, apart from ``proctor.cli`` (the composition root that
assembles the services' commands), so that a service's ``cli.py`` can read it
without importing the root (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from proctor.core.settings import Settings


@dataclass
class CliContext:
    debug: bool
    config_file: Path | None

    def settings(self) -> Settings:
        from proctor.core.settings import load_settings

        return load_settings(self.config_file)


def cli_context(ctx: typer.Context) -> CliContext:
    obj = ctx.find_root().obj
    if isinstance(obj, CliContext):
        return obj
    return CliContext(debug=False, config_file=None)
