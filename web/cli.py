"""``proctor serve`` and ``proctor user``.

NOT YET BUILT: arrives with issues #8 (web app) and #9 (accounts).
"""

from __future__ import annotations

import typer

from proctor.errors import NotAvailableYet

user_app = typer.Typer(
    help="Accounts: create the first admin, users, tokens.", no_args_is_help=True
)


def serve() -> None:
    """Serve the web app."""
    raise NotAvailableYet("proctor serve is not available yet (issue #8)")


@user_app.command("create-admin")
def create_admin() -> None:
    """Create the first admin account."""
    raise NotAvailableYet("proctor user is not available yet (issue #9)")
