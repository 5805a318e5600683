"""review actions: behavioural failure-mode tags (tag_failure, retract_tag)

A reviewer (or the labelled automatic proposer) tags a moment of an episode
with a failure mode from the annotator's taxonomy; a tag is withdrawn by a
later ``retract_tag`` record, never by deleting or editing the first. Both
are review records like the others, so only the action's CHECK widens.

Revision ID: f2a9c4e7b1d3
Revises: f2b8d4a6c913
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f2a9c4e7b1d3"
down_revision: str | None = "f2b8d4a6c913"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KINDS = ("confirm", "move", "reject", "add", "flag_count", "resolve_flag", "correct_log")
_TAGS = ("tag_failure", "retract_tag")


def _kinds(kinds: Sequence[str]) -> None:
    listed = ", ".join(f"'{k}'" for k in kinds)
    with op.batch_alter_table("review_actions", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_review_actions_review_action_kind"), type_="check")
        batch_op.create_check_constraint(
            op.f("ck_review_actions_review_action_kind"), sa.text(f"action IN ({listed})")
        )
    if op.get_bind().dialect.name == "sqlite":
        # SQLite's batch mode rebuilds the table, and its triggers go with the old
        # one: the append-only guard is put back exactly as the first revision made it
        for verb in ("update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS trg_review_actions_no_{verb}")
            op.execute(
                f"CREATE TRIGGER trg_review_actions_no_{verb} BEFORE {verb.upper()} "
                "ON review_actions BEGIN SELECT RAISE(ABORT, 'review_actions is append-only'); END"
            )


def upgrade() -> None:
    _kinds(_KINDS + _TAGS)


def downgrade() -> None:
    actions = sa.table("review_actions", sa.column("action", sa.String))
    left = op.get_bind().scalar(
        sa.select(sa.func.count()).select_from(actions).where(actions.c.action.in_(_TAGS))
    )
    if left:
        # review records are append-only: dropping reviewers' tags is not a migration's call
        raise RuntimeError(
            f"{left} failure-mode tag record(s) exist; the older schema cannot hold them"
        )
    _kinds(_KINDS)
