"""stations: site and cell profile; campaigns: the cell profiles they accept

A station declares where it stands (``site``) and what kind of cell it is
(``cell_profile``) in its config; a campaign may list the cell profiles whose
stations run it. NULL everywhere for rows made before this revision: a
station that declared nothing, a campaign open to any station.

Revision ID: 9e4c1b7d2f60
Revises: f2b9d4a6c813
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Text
from sqlalchemy.dialects import postgresql

revision: str = "9e4c1b7d2f60"
down_revision: str | None = "f2b9d4a6c813"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("stations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("site", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("cell_profile", sa.String(length=64), nullable=True))
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "cell_profiles",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.drop_column("cell_profiles")
    with op.batch_alter_table("stations", schema=None) as batch_op:
        batch_op.drop_column("cell_profile")
        batch_op.drop_column("site")
