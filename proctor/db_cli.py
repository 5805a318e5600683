"""``proctor db``: schema migrations on the configured database."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy.engine import make_url

db_app = typer.Typer(
    rich_markup_mode=None,
    help="Database schema: upgrade, downgrade, show the current revision.",
    no_args_is_help=True,
)


def _describe(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


@db_app.command()
def upgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Migrate the database up to REVISION (default: the newest)."""
    from proctor.core.cli_context import cli_context
    from proctor.core.db import migrate

    url = cli_context(ctx).settings().db_url
    migrate.upgrade(url, revision)
    typer.echo(f"{_describe(url)}: at revision {migrate.current(url) or 'base'}")


@db_app.command()
def downgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="Target revision ('base' empties the schema).")],
) -> None:
    """Migrate the database down to REVISION."""
    from proctor.core.cli_context import cli_context
    from proctor.core.db import migrate

    url = cli_context(ctx).settings().db_url
    migrate.downgrade(url, revision)
    typer.echo(f"{_describe(url)}: at revision {migrate.current(url) or 'base'}")


@db_app.command()
def current(ctx: typer.Context) -> None:
    """Show the database's revision and the code's newest one."""
    from proctor.core.cli_context import cli_context
    from proctor.core.db import migrate

    url = cli_context(ctx).settings().db_url
    rev = migrate.current(url)
    head = migrate.head()
    state = "up to date" if rev == head else f"behind: run `proctor db upgrade` to reach {head}"
    typer.echo(f"{_describe(url)}: at revision {rev or 'base'} ({state})")
