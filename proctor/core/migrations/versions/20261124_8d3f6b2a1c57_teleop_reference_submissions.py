"""submissions: the teleop kind (the human reference a station host serves itself)

The human reference is a person at the station driving the arm through
``proctor station teleop``, which serves the policy protocol on the station
host's loopback. The gateway on the server cannot reach that address (and must
never connect to loopback or private addresses for submitters), so the
reference gets a kind of its own: the scheduler hands its loopback URL to the
claiming station, which connects to it directly. Widens the kind's CHECK and
the payload rule (a teleop submission carries its URL in ``endpoint_url``).

Revision ID: 8d3f6b2a1c57
Revises: 5c1e9a0d7f42
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "8d3f6b2a1c57"
down_revision: str | None = "5c1e9a0d7f42"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHECKPOINT = "(kind = 'checkpoint' AND checkpoint_sha256 IS NOT NULL)"
_ENDPOINT = "(kind = 'endpoint' AND endpoint_url IS NOT NULL)"
_TELEOP = "(kind = 'teleop' AND endpoint_url IS NOT NULL)"


def _kinds(teleop: bool, payload: str) -> None:
    kinds = "'checkpoint', 'endpoint'" + (", 'teleop'" if teleop else "")
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_submissions_submission_kind"), type_="check")
        batch_op.drop_constraint(op.f("ck_submissions_kind_has_payload"), type_="check")
        batch_op.create_check_constraint(
            op.f("ck_submissions_submission_kind"), sa.text(f"kind IN ({kinds})")
        )
        batch_op.create_check_constraint(op.f("ck_submissions_kind_has_payload"), sa.text(payload))


def upgrade() -> None:
    _kinds(True, f"{_CHECKPOINT} OR {_ENDPOINT} OR {_TELEOP}")


def downgrade() -> None:
    submissions = sa.table("submissions", sa.column("kind", sa.String))
    left = op.get_bind().scalar(
        sa.select(sa.func.count()).select_from(submissions).where(submissions.c.kind == "teleop")
    )
    if left:
        # the older schema has no way to hold them; deleting a registered reference
        # (and the campaigns pointing at it) is not a migration's decision
        raise RuntimeError(
            f"{left} teleop reference submission(s) exist; the older schema cannot hold "
            "them: delete them (and what refers to them) first"
        )
    _kinds(False, f"{_CHECKPOINT} OR {_ENDPOINT}")
