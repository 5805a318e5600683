"""``proctor campaign``.

NOT YET BUILT: arrives with issue #6 (blind randomized scheduling).
"""

from __future__ import annotations

import typer

from proctor.errors import NotAvailableYet

campaign_app = typer.Typer(
    help="Campaigns: create, start, status, close, reveal.", no_args_is_help=True
)


@campaign_app.command()
def create() -> None:
    """Create a campaign from a protocol."""
    raise NotAvailableYet("proctor campaign is not available yet (issue #6)")
