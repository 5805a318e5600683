"""``proctor station gripper-activate``: reset and activate the gripper from
the command line, for when the daemon is not running (a gripper in a major
fault fails pre-flight, and pre-flight runs before the daemon starts).

Activation sweeps the fingers fully open and closed: the command says so and
asks before it moves anything (``--yes`` for scripts that have asked already).
With the daemon running, use the console's "Activate gripper" instead: the
daemon owns the serial line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from proctor.core.errors import UsageError
from proctor.station.drivers.gripper.base import GripperFault


def gripper_activate(
    profile: Annotated[
        str, typer.Option("--profile", help="Station profile: real or twin.")
    ] = "real",
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Station config file (TOML); defaults when omitted."),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="Do not ask (hands are clear, nothing is held).")
    ] = False,
) -> None:
    """Reset and activate the gripper (its fingers sweep fully open and closed)."""
    from proctor.station.config import load_station_config
    from proctor.station.profiles import build_cell

    if profile not in ("real", "twin"):
        raise UsageError(f"--profile: a hardware cell (real or twin), not '{profile}'")
    cell = build_cell(profile, load_station_config(config))
    try:
        gripper = cell.gripper
        try:
            gripper.connect()
            state = gripper.read_state()
        except GripperFault as exc:
            raise UsageError(f"gripper: {exc}") from None
        typer.echo(
            f"gripper: {'activated' if state.activated else 'not activated'}, "
            f"{state.fault or 'no fault'}, fingers at {state.position:.2f}"
        )
        if not yes and not typer.confirm(
            "Activating sweeps the fingers fully open and closed. Hands clear, nothing "
            "between the fingers?"
        ):
            raise typer.Exit(1)
        try:
            gripper.activate()
            state = gripper.read_state()
        except GripperFault as exc:
            raise UsageError(f"gripper activation failed: {exc}") from None
        fault = state.fault or "no fault"
        typer.echo(f"gripper activated: {fault}, fingers at {state.position:.2f}")
    finally:
        cell.close()
