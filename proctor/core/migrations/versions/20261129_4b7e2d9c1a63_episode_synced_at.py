"""episodes: when the station last synced the episode over the station API

``synced_at`` is the server's time of the last accepted snapshot (or running
heartbeat) of an episode a station host sends over the station API. A claim
while the station's held run has a live episode synced within the claim lease
is refused (409): the episode is still running, and settling its run would
give the policy an extra episode. NULL: written here directly (an in-process
station, a simulation), or synced before this revision.

Revision ID: 4b7e2d9c1a63
Revises: b5d2e8f4a1c7
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import proctor.core.db.types

revision: str = "4b7e2d9c1a63"
down_revision: str | None = "b5d2e8f4a1c7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("synced_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_column("synced_at")
