"""episodes: how many commands the station's safety envelope clamped or stopped

The station records the count in each episode's manifest (``envelope.interventions``)
and, from this revision, in ``episodes.envelope_interventions``, which
the analysis reads for the leaderboard's envelope interventions per episode. Episodes
recorded before have NULL: not counted, which the analysis leaves out of the rate
rather than reading as zero.

Revision ID: a3f8d2c6e1b9
Revises: 8d3f6b2a1c57
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a3f8d2c6e1b9"
down_revision: str | None = "8d3f6b2a1c57"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("envelope_interventions", sa.Integer(), nullable=True))
        batch_op.create_check_constraint(
            op.f("ck_episodes_envelope_interventions_nonnegative"),
            "envelope_interventions IS NULL OR envelope_interventions >= 0",
        )


def downgrade() -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_constraint(
            op.f("ck_episodes_envelope_interventions_nonnegative"), type_="check"
        )
        batch_op.drop_column("envelope_interventions")
