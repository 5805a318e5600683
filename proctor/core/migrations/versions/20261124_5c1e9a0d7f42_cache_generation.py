"""system: the cache generation row (invalidation across processes)

Every write through a ProctorSession bumps ``cache_generation.value`` in
its own transaction; each web process checks the row at most every
``web.cache_check_s`` and drops what it cached at an older value.

Revision ID: 5c1e9a0d7f42
Revises: e4a7c2d91b36
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5c1e9a0d7f42"
down_revision: str | None = "e4a7c2d91b36"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "cache_generation",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cache_generation")),
    )
    op.bulk_insert(table, [{"id": 1, "value": 0}])


def downgrade() -> None:
    op.drop_table("cache_generation")
