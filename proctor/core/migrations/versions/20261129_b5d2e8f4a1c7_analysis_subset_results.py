"""analysis_subset_results: each documented factor level scored with its snapshot

The public's filtered leaderboards (one of tote_side, camera_side,
object_tag at one level) are computed when the snapshot is, and read from
here; a request never starts an analysis for an anonymous caller
(security review, round three, [N2]).

Revision ID: b5d2e8f4a1c7
Revises: 4b7e2c9d1a60
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b5d2e8f4a1c7"
down_revision: str | None = "4b7e2c9d1a60"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    json = sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql")
    op.create_table(
        "analysis_subset_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("snapshot_id", sa.Integer(), nullable=False),
        sa.Column("factor", sa.String(length=32), nullable=False),
        sa.Column("level", sa.String(length=200), nullable=False),
        sa.Column("result", json, nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["snapshot_id"],
            ["analysis_snapshots.id"],
            name=op.f("fk_analysis_subset_results_snapshot_id_analysis_snapshots"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_analysis_subset_results")),
        sa.UniqueConstraint(
            "snapshot_id", "factor", "level", name="uq_analysis_subset_results_level"
        ),
    )
    with op.batch_alter_table("analysis_subset_results", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_analysis_subset_results_snapshot_id"), ["snapshot_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("analysis_subset_results", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_analysis_subset_results_snapshot_id"))
    op.drop_table("analysis_subset_results")
