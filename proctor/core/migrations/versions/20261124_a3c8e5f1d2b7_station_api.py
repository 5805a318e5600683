"""station API: the station's hello, synced episodes, idempotent requests

A station host talks to the server over HTTPS instead of writing the campaign
database. Its hello records its software version, cell layout hash and clock
offset; an episode it syncs carries the station's revision (``sync_rev``, an
older one is ignored) and events numbered in the station's own ledger
(``station_seq``, unique per episode, so a re-sent episode adds each once);
``station_requests`` keeps the answer to each ``Idempotency-Key``.

Revision ID: a3c8e5f1d2b7
Revises: 7b4e1f9c2d60
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Text
from sqlalchemy.dialects import postgresql

import proctor.core.db.types

revision: str = "a3c8e5f1d2b7"
down_revision: str | None = "7b4e1f9c2d60"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("stations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("software_version", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("layout_hash", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("clock_offset_s", sa.Double(), nullable=True))
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sync_rev", sa.Integer(), nullable=True))
    with op.batch_alter_table("episode_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("station_seq", sa.Integer(), nullable=True))
        batch_op.create_unique_constraint(
            "uq_episode_events_episode_station_seq", ["episode_id", "station_seq"]
        )
    op.create_table(
        "station_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("station_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("route", sa.String(length=256), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column(
            "response",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["station_id"],
            ["stations.id"],
            name=op.f("fk_station_requests_station_id_stations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_station_requests")),
        sa.UniqueConstraint("station_id", "key", name="uq_station_requests_station_key"),
    )


def downgrade() -> None:
    op.drop_table("station_requests")
    with op.batch_alter_table("episode_events", schema=None) as batch_op:
        batch_op.drop_constraint("uq_episode_events_episode_station_seq", type_="unique")
        batch_op.drop_column("station_seq")
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_column("sync_rev")
    with op.batch_alter_table("stations", schema=None) as batch_op:
        batch_op.drop_column("clock_offset_s")
        batch_op.drop_column("layout_hash")
        batch_op.drop_column("software_version")
