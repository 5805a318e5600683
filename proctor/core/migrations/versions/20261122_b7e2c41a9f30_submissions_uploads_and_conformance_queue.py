"""submissions: upload sessions and the conformance queue

Revision ID: b7e2c41a9f30
Revises: d5abae0fd6e5
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import proctor.core.db.types

revision: str = "b7e2c41a9f30"
down_revision: str | None = "d5abae0fd6e5"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "upload_sessions",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("filename", sa.String(length=255), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("received_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "received_bytes >= 0 AND received_bytes <= size_bytes",
            name=op.f("ck_upload_sessions_received_in_range"),
        ),
        sa.CheckConstraint("size_bytes > 0", name=op.f("ck_upload_sessions_size_positive")),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name=op.f("fk_upload_sessions_owner_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_upload_sessions")),
    )
    with op.batch_alter_table("upload_sessions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_upload_sessions_expires_at"), ["expires_at"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_upload_sessions_owner_id"), ["owner_id"], unique=False)

    op.create_table(
        "conformance_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "queued",
                "running",
                "done",
                "error",
                name="conformance_run_status",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("requested_by_id", sa.Integer(), nullable=True),
        sa.Column("requested_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("started_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("finished_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("worker", sa.String(length=128), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["requested_by_id"],
            ["users.id"],
            name=op.f("fk_conformance_runs_requested_by_id_users"),
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_conformance_runs_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conformance_runs")),
    )
    with op.batch_alter_table("conformance_runs", schema=None) as batch_op:
        batch_op.create_index("ix_conformance_runs_status_id", ["status", "id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_conformance_runs_submission_id"), ["submission_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("conformance_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_conformance_runs_submission_id"))
        batch_op.drop_index("ix_conformance_runs_status_id")

    op.drop_table("conformance_runs")
    with op.batch_alter_table("upload_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_upload_sessions_owner_id"))
        batch_op.drop_index(batch_op.f("ix_upload_sessions_expires_at"))

    op.drop_table("upload_sessions")
