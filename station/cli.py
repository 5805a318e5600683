"""``proctor station`` and ``proctor policy``.

NOT YET BUILT: arrives with issues #4 (station on the simulated cell),
#5 (hardware drivers) and #9 (conformance checks).
"""

from __future__ import annotations

import typer

from proctor.errors import NotAvailableYet

station_app = typer.Typer(help="The station daemon.", no_args_is_help=True)
policy_app = typer.Typer(
    help="Policy servers: demo policies, conformance checks.", no_args_is_help=True
)


@station_app.command()
def run() -> None:
    """Start the station daemon."""
    raise NotAvailableYet("proctor station is not available yet (issue #4)")


@policy_app.command("serve-demo")
def serve_demo() -> None:
    """Serve a scripted demo policy over the policy protocol."""
    raise NotAvailableYet("proctor policy serve-demo is not available yet (issue #4)")
