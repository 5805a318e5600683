"""station_tokens: per-station credentials for the policy gateway

An admin enrols a station and gets a token scoped to it; only its SHA-256 is
stored. A rotation gives the old token an ``expires_at`` (the window in which
both are valid); a revocation sets ``revoked_at``.

Revision ID: 7b4e1f9c2d60
Revises: f2a9c4e7b1d3
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import proctor.core.db.types

revision: str = "7b4e1f9c2d60"
down_revision: str | None = "f2a9c4e7b1d3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    when = proctor.core.db.types.UTCDateTime(timezone=True)
    op.create_table(
        "station_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("station_id", sa.Integer(), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", when, nullable=False),
        sa.Column("expires_at", when, nullable=True),
        sa.Column("last_used_at", when, nullable=True),
        sa.Column("revoked_at", when, nullable=True),
        sa.ForeignKeyConstraint(
            ["station_id"],
            ["stations.id"],
            name=op.f("fk_station_tokens_station_id_stations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_station_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_station_tokens_token_hash")),
    )
    with op.batch_alter_table("station_tokens", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_station_tokens_station_id"), ["station_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("station_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_station_tokens_station_id"))
    op.drop_table("station_tokens")
