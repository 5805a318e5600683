"""The command-line options that name a policy server's wire, shared by the
commands that connect to one (``proctor policy check``, ``proctor station
episode``): the dialect, its API key, the exterior camera's numbering and
the action units, each checked with a message that names the option."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from proctor.core.domain import EndpointDialect
from proctor.core.errors import UsageError
from proctor.policywire import dialects

DialectOpt = Annotated[
    str | None,
    typer.Option(
        help=f"{dialects.choices_text()} (default: openpi or roboarena, "
        "detected from the server's metadata; a Positronic server must be named)."
    ),
]
ApiKeyEnvOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key-env",
        help="An environment variable holding the server's API key (sent as "
        "'Authorization: Api-Key …', as openpi's client does, or as "
        "'Authorization: Bearer …' with --dialect positronic_v1, as Positronic's does).",
    ),
]
ExteriorNumberingOpt = Annotated[
    int | None,
    typer.Option(
        "--exterior-numbering",
        min=0,
        max=1,
        help="openpi, roboarena: the first exterior camera's key, "
        "observation/exterior_image_1_left (1, the default: DROID policies) or "
        "…_0_left (0: RoboArena's test script, DreamZero).",
    ),
]
ActionUnitsOpt = Annotated[
    str | None,
    typer.Option(
        "--action-units",
        help="openpi, roboarena: what the numbers of a velocity action mean, si (rad/s, "
        "m/s) or droid (DROID's normalised per-step deltas); default: as the server's "
        "metadata says (its action_units, else its dialect's default). A server whose "
        "metadata declares other units is refused.",
    ),
]


def dialect_option(value: str | None) -> EndpointDialect | None:
    """``--dialect``: one of the wire dialects, or None (detected from the metadata)."""
    try:
        return EndpointDialect(value) if value else None
    except ValueError:
        raise UsageError(
            f"--dialect: '{value}' is not one of {', '.join(d.value for d in EndpointDialect)}"
        ) from None


def policy_url(name: str, url: str, dialect: EndpointDialect | None) -> str:
    """The URL to connect to, as its dialect normalises it: a Positronic
    server's gets its session path (``ws://host:port`` → ``ws://host:port/api/v1/session``)."""
    try:
        return dialects.get_or_detected(dialect).dial_url(url)
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None


def action_units_option(value: str | None, dialect: EndpointDialect | None) -> str | None:
    """``--action-units``: a registered convention, for a dialect whose replies may be
    velocities (None: the server's metadata decides)."""
    from proctor.policywire.wire import units

    if value is None:
        return None
    try:
        chosen = units.check(value)
    except ValueError as exc:
        raise UsageError(f"--action-units: {str(exc).split(': ', 1)[-1]}") from None
    if dialect is not None and not dialects.get(dialect).velocity_actions:
        raise UsageError(
            f"--action-units: the {dialect.value} dialect's commands are positions, which "
            "have no units to select; leave it out"
        )
    return chosen


def api_key(env_var: str | None) -> str | None:
    """``--api-key-env``: the key held by that environment variable."""
    if not env_var:
        return None
    key = os.environ.get(env_var, "")
    if not key:
        raise UsageError(f"--api-key-env: the environment variable {env_var} is empty")
    return key
