"""runner_servers: uploaded checkpoints served in a sandbox on a runner host

One row per life of one sandboxed server (``proctor/runner``): queued when a
conformance check or a running campaign needs the checkpoint, claimed by a
runner host, ready at a URL only the gateway and the checker use, then
stopped or failed with a reason from a closed set and whose fault it was.

Revision ID: c5d1e7f3a2b8
Revises: a3f8d2c6e1b9
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import proctor.core.db.types

revision: str = "c5d1e7f3a2b8"
down_revision: str | None = "a3f8d2c6e1b9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STATUS = ("queued", "building", "starting", "ready", "stopped", "failed")
_FAILURE = (
    "setup_crash",
    "inference_crash",
    "out_of_memory",
    "latency_exceeded",
    "wall_clock_exceeded",
    "sandbox_refused",
    "runner_unresponsive",
    "host_error",
)


def _enum(values: Sequence[str], name: str) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, create_constraint=True, length=32)


def upgrade() -> None:
    when = proctor.core.db.types.UTCDateTime(timezone=True)
    json = sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql")
    op.create_table(
        "runner_servers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("status", _enum(_STATUS, "runner_status"), nullable=False),
        sa.Column("stage", sa.String(length=200), nullable=False),
        sa.Column("requested_for", sa.String(length=32), nullable=False),
        sa.Column("requested_at", when, nullable=False),
        sa.Column("host", sa.String(length=128), nullable=True),
        sa.Column("worker", sa.String(length=128), nullable=True),
        sa.Column("claimed_at", when, nullable=True),
        sa.Column("url", sa.String(length=512), nullable=True),
        sa.Column("dialect", sa.String(length=32), nullable=True),
        sa.Column("device", sa.String(length=32), nullable=True),
        sa.Column("ready_at", when, nullable=True),
        sa.Column("heartbeat_at", when, nullable=True),
        sa.Column("last_used_at", when, nullable=True),
        sa.Column("finished_at", when, nullable=True),
        sa.Column("failure", _enum(_FAILURE, "runner_failure"), nullable=True),
        sa.Column("fault", _enum(("submitter", "platform"), "runner_fault"), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("diagnostics", json, nullable=False),
        sa.CheckConstraint(
            "(status = 'failed') = (failure IS NOT NULL)",
            name=op.f("ck_runner_servers_failed_has_failure"),
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_runner_servers_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runner_servers")),
    )
    with op.batch_alter_table("runner_servers", schema=None) as batch_op:
        batch_op.create_index("ix_runner_servers_status_id", ["status", "id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_runner_servers_submission_id"), ["submission_id"], unique=False
        )
        # one live server per submission: two racing requests queue one
        live = sa.text("status IN ('queued', 'building', 'starting', 'ready')")
        batch_op.create_index(
            "uq_runner_servers_live_submission",
            ["submission_id"],
            unique=True,
            sqlite_where=live,
            postgresql_where=live,
        )


def downgrade() -> None:
    with op.batch_alter_table("runner_servers", schema=None) as batch_op:
        batch_op.drop_index("uq_runner_servers_live_submission")
        batch_op.drop_index(batch_op.f("ix_runner_servers_submission_id"))
        batch_op.drop_index("ix_runner_servers_status_id")
    op.drop_table("runner_servers")
