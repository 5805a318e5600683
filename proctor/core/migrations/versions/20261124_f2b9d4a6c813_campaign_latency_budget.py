"""campaigns: the protocol's latency budget

A campaign may bound the policy's round trip: ``{"budget_ms": …, "tolerance": …}``
(calls over the budget an episode may have before it ends charged to the
policy, docs/methods.md §1). NULL: latency is measured, never enforced, as
for every campaign created before this revision.

Revision ID: f2b9d4a6c813
Revises: c5d1e7f3a2b8
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Text
from sqlalchemy.dialects import postgresql

revision: str = "f2b9d4a6c813"
down_revision: str | None = "c5d1e7f3a2b8"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "latency_budget",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.drop_column("latency_budget")
