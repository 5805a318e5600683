"""runner_hosts: each runner host's heartbeat, so a checkpoint's conformance
check fails at once when no host is alive to serve it

Revision ID: 4b7e2c9d1a60
Revises: 9d3c6a1e5f72
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import proctor.core.db.types

revision: str = "4b7e2c9d1a60"
down_revision: str | None = "9d3c6a1e5f72"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    when = proctor.core.db.types.UTCDateTime(timezone=True)
    op.create_table(
        "runner_hosts",
        sa.Column("host", sa.String(length=128), nullable=False),
        sa.Column("worker", sa.String(length=128), nullable=False),
        sa.Column("seen_at", when, nullable=False),
        sa.PrimaryKeyConstraint("host", name=op.f("pk_runner_hosts")),
    )
    with op.batch_alter_table("runner_hosts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runner_hosts_seen_at"), ["seen_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runner_hosts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runner_hosts_seen_at"))
    op.drop_table("runner_hosts")
