"""station_uploads: artifact uploads from station hosts, parts straight to the store

A station host holds no store credentials: it asks the server for an upload,
sends the parts to presigned store URLs (or through the server, for a local
store), and the server verifies size and sha256 before it registers the
artifact. One row per upload; at most one open upload per (episode, sha256).

Revision ID: 9d3c6a1e5f72
Revises: a3c8e5f1d2b7
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import proctor.core.db.types

revision: str = "9d3c6a1e5f72"
down_revision: str | None = "a3c8e5f1d2b7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KINDS = (
    "video",
    "frame_index",
    "telemetry",
    "rrd",
    "manifest",
    "checkpoint",
    "ground_truth",
    "photo",
)
_STATES = ("open", "complete", "aborted")


def _enum(values: Sequence[str], name: str) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, create_constraint=True, length=32)


def upgrade() -> None:
    when = proctor.core.db.types.UTCDateTime(timezone=True)
    json = sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql")
    op.create_table(
        "station_uploads",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("station_id", sa.Integer(), nullable=False),
        sa.Column("episode_id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("kind", _enum(_KINDS, "upload_artifact_kind"), nullable=False),
        sa.Column("camera", sa.String(length=32), nullable=True),
        sa.Column("media_type", sa.String(length=128), nullable=False),
        sa.Column("frame_count", sa.Integer(), nullable=True),
        sa.Column("details", json, nullable=False),
        sa.Column("part_size", sa.BigInteger(), nullable=False),
        sa.Column("backend_id", sa.String(length=1024), nullable=False),
        sa.Column("state", _enum(_STATES, "station_upload_state"), nullable=False),
        sa.Column("artifact_id", sa.Integer(), nullable=True),
        sa.Column("created_at", when, nullable=False),
        sa.Column("completed_at", when, nullable=True),
        sa.CheckConstraint("size_bytes >= 0", name=op.f("ck_station_uploads_size_nonnegative")),
        sa.CheckConstraint("part_size > 0", name=op.f("ck_station_uploads_part_size_positive")),
        sa.ForeignKeyConstraint(
            ["station_id"],
            ["stations.id"],
            name=op.f("fk_station_uploads_station_id_stations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episodes.id"],
            name=op.f("fk_station_uploads_episode_id_episodes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["artifact_id"],
            ["artifacts.id"],
            name=op.f("fk_station_uploads_artifact_id_artifacts"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_station_uploads")),
    )
    with op.batch_alter_table("station_uploads", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_station_uploads_station_id"), ["station_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_station_uploads_episode_id"), ["episode_id"], unique=False
        )
        # one open upload per artifact of an episode: a repeated begin resumes it
        open_ = sa.text("state = 'open'")
        batch_op.create_index(
            "uq_station_uploads_open_artifact",
            ["episode_id", "sha256"],
            unique=True,
            sqlite_where=open_,
            postgresql_where=open_,
        )


def downgrade() -> None:
    with op.batch_alter_table("station_uploads", schema=None) as batch_op:
        batch_op.drop_index("uq_station_uploads_open_artifact")
        batch_op.drop_index(batch_op.f("ix_station_uploads_episode_id"))
        batch_op.drop_index(batch_op.f("ix_station_uploads_station_id"))
    op.drop_table("station_uploads")
