"""``proctor policy``: serve a scripted demo policy, list the demo profiles,
check a policy server's conformance to the station's protocol."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from proctor.core.errors import ProctorError, UsageError
from proctor.policywire.cli_options import (
    ActionUnitsOpt,
    ApiKeyEnvOpt,
    DialectOpt,
    ExteriorNumberingOpt,
    action_units_option,
    api_key,
    dialect_option,
    policy_url,
)
from proctor.policywire.handshake import auth_headers
from proctor.policywire.serving import dialects as serving_dialects

policy_app = typer.Typer(
    rich_markup_mode=None,
    help="Policy servers: demo policies, conformance checks.",
    no_args_is_help=True,
)


@policy_app.command("serve-demo")
def serve_demo(
    profile: Annotated[
        str, typer.Option(help="Demo profile (see `proctor policy demo-profiles`).")
    ],
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one.")] = 8000,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    seed: Annotated[int, typer.Option(help="Seed of the controller's own randomness.")] = 0,
    fault: Annotated[
        str | None,
        typer.Option(
            help="DRILL: misbehave on purpose after N requests per connection — "
            "hang[:N], disconnect[:N], bad-shape[:N] or error[:N].",
        ),
    ] = None,
) -> None:
    """Serve a scripted demo policy on the wire its profile names (openpi
    WebSocket, its RoboArena dialect, or Positronic v1)."""
    from proctor.policywire.serving.demo import DemoPolicy, demo_profile, demo_serve
    from proctor.policywire.serving.openpi import Fault

    try:
        p = demo_profile(profile)
        drill = Fault.parse(fault) if fault else None
        server = demo_serve(DemoPolicy(p, seed=seed), host=host, port=port, fault=drill)
    except ValueError as exc:
        raise UsageError(f"--fault: {exc}" if fault else str(exc)) from None
    logging.basicConfig(level=logging.WARNING)

    def started() -> None:
        wire = serving_dialects.get(p.dialect).served_text(server)
        typer.echo(f"serving demo policy '{p.name}' on {server.url}{wire}")
        sys.stdout.flush()

    try:
        server.serve_forever(started)
    except OSError as exc:
        raise ProctorError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        pass


@policy_app.command("demo-profiles")
def demo_profiles() -> None:
    """List the demo policies and the reference agent."""
    from proctor.policywire.serving.demo import DEMO_PROFILES

    for p in DEMO_PROFILES.values():
        tag = " (reference)" if p.reference else ""
        typer.echo(f"{p.name:10s}{tag:12s} {p.description}")


@policy_app.command("check")
def check(
    endpoint: Annotated[
        str,
        typer.Argument(
            help="The policy server's WebSocket URL: ws://host:port or wss://… (for "
            "positronic_v1, /api/v1/session is added to a URL with no path)."
        ),
    ],
    dialect: DialectOpt = None,
    exterior_numbering: ExteriorNumberingOpt = None,
    action_units: ActionUnitsOpt = None,
    action_space: Annotated[
        str | None,
        typer.Option(
            "--action-space",
            help="The action space you declare: joint_position, joint_velocity, "
            "cartesian_position or cartesian_velocity.",
        ),
    ] = None,
    chunk_length: Annotated[
        int | None, typer.Option(min=1, help="The number of actions per reply you declare.")
    ] = None,
    deterministic: Annotated[
        bool,
        typer.Option(
            "--deterministic", help="Declare that the same observations give the same actions."
        ),
    ] = False,
    name: Annotated[
        list[str] | None,
        typer.Option(
            "--name",
            help="A name that must not appear in the metadata: your policy's, your team's "
            "(repeatable).",
        ),
    ] = None,
    api_key_env: ApiKeyEnvOpt = None,
    timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds a reply may take (the station's limit).")
    ] = 5.0,
    sim_keys: Annotated[
        bool,
        typer.Option(
            "--sim-keys/--no-sim-keys",
            help="Send the simulated cell's privileged sim/… keys, as the sim profile does.",
        ),
    ] = True,
    json_out: Annotated[
        Path | None,
        typer.Option("--json", help="Also write the report as JSON to this file ('-': stdout)."),
    ] = None,
) -> None:
    """Check that a policy server speaks the station's protocol as declared
    (exit code 0 when it passes, 1 when it fails)."""
    import json

    from rich.console import Console

    from proctor.policywire.conformance.check import (
        CheckOptions,
        Expectations,
        Status,
        check_endpoint,
        format_report,
    )
    from proctor.policywire.wire.spec import ActionSpace

    if not endpoint.startswith(("ws://", "wss://")):
        raise UsageError(f"ENDPOINT: '{endpoint}' is not a ws:// or wss:// URL")
    chosen = dialect_option(dialect)
    endpoint = policy_url("ENDPOINT", endpoint, chosen)
    try:
        space = ActionSpace(action_space) if action_space else None
    except ValueError:
        raise UsageError(
            f"--action-space: '{action_space}' is not one of "
            f"{', '.join(a.value for a in ActionSpace)}"
        ) from None
    units = action_units_option(action_units, chosen)
    headers = auth_headers(chosen, api_key(api_key_env))
    err = Console(stderr=True)
    with err.status("checking…") as status:
        report = check_endpoint(
            endpoint,
            expect=Expectations(
                action_space=space,
                chunk_length=chunk_length,
                deterministic=deterministic,
                identity_terms=tuple(name or ()),
            ),
            options=CheckOptions(
                dialect=chosen,
                headers=headers,
                request_timeout_s=timeout,
                sim_keys=sim_keys,
                exterior_numbering=exterior_numbering,
                action_units=units,
            ),
            progress=lambda msg: status.update(f"checking: {msg}…"),
        )
    colors = {"[ok  ]": "green", "[FAIL]": "red", "[warn]": "yellow"}
    for line in format_report(report):
        color = next((c for mark, c in colors.items() if mark in line[:10]), None)
        typer.echo(typer.style(line, fg=color) if color else line)
    if json_out is not None:
        text = json.dumps(report.to_json(), indent=2)
        if str(json_out) == "-":
            typer.echo(text)
        else:
            json_out.write_text(text + "\n", encoding="utf-8")
    if report.verdict != Status.passed:
        raise typer.Exit(1)
