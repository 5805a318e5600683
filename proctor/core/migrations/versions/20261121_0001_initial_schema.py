"""initial schema: the whole domain, and append-only triggers

Revision ID: 0001
Revises:
Create Date: 2026-11-21 23:04:18.695924
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Text
from sqlalchemy.dialects import postgresql

import proctor.core.db.types

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "object_types",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("display_name", sa.String(length=128), nullable=False),
        sa.Column(
            "tags",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_object_types")),
        sa.UniqueConstraint("name", name=op.f("uq_object_types_name")),
    )
    op.create_table(
        "stations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("profile", sa.String(length=16), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column(
            "config",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stations")),
        sa.UniqueConstraint("name", name=op.f("uq_stations_name")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("display_name", sa.String(length=128), nullable=False),
        sa.Column("email", sa.String(length=256), nullable=True),
        sa.Column("password_hash", sa.String(length=256), nullable=True),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("username", name=op.f("uq_users_username")),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("token_hash", sa.String(length=128), nullable=False),
        sa.Column(
            "scopes",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_api_tokens_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_tokens_user_id"), ["user_id"], unique=False)

    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("actor_id", sa.Integer(), nullable=True),
        sa.Column("actor_label", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target_type", sa.String(length=64), nullable=False),
        sa.Column("target_id", sa.String(length=64), nullable=False),
        sa.Column(
            "details",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["actor_id"], ["users.id"], name=op.f("fk_audit_log_actor_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_log_action"), ["action"], unique=False)

    op.create_table(
        "campaigns",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "draft",
                "running",
                "closed",
                "released",
                name="campaign_status",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("items_per_episode", sa.Integer(), nullable=False),
        sa.Column("per_item_cap_s", sa.Double(), nullable=False),
        sa.Column("tau_s", sa.Double(), nullable=False),
        sa.Column("episodes_per_cell", sa.Integer(), nullable=False),
        sa.Column(
            "spatial_configs",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "protocol_extra",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("seed_commitment", sa.String(length=64), nullable=True),
        sa.Column("allocation_seed", sa.String(length=128), nullable=True),
        sa.Column("created_by_id", sa.Integer(), nullable=True),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("started_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("closed_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("released_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "episodes_per_cell > 0", name=op.f("ck_campaigns_episodes_per_cell_positive")
        ),
        sa.CheckConstraint("items_per_episode > 0", name=op.f("ck_campaigns_items_positive")),
        sa.CheckConstraint("per_item_cap_s > 0", name=op.f("ck_campaigns_cap_positive")),
        sa.CheckConstraint("tau_s > 0", name=op.f("ck_campaigns_tau_positive")),
        sa.ForeignKeyConstraint(
            ["created_by_id"], ["users.id"], name=op.f("fk_campaigns_created_by_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_campaigns")),
        sa.UniqueConstraint("name", name=op.f("uq_campaigns_name")),
    )
    op.create_table(
        "policies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column(
            "kind",
            sa.Enum(
                "policy",
                "reference",
                name="policy_kind",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column(
            "visibility",
            sa.Enum(
                "private",
                "public",
                name="visibility",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name=op.f("fk_policies_owner_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policies")),
        sa.UniqueConstraint("name", name=op.f("uq_policies_name")),
    )
    with op.batch_alter_table("policies", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_policies_owner_id"), ["owner_id"], unique=False)

    op.create_table(
        "user_roles",
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column(
            "role",
            sa.Enum(
                "admin",
                "operator",
                "reviewer",
                "submitter",
                name="role",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_user_roles_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("user_id", "role", name=op.f("pk_user_roles")),
    )
    op.create_table(
        "analysis_snapshots",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=True),
        sa.Column(
            "label_stream",
            sa.Enum(
                "auto_and_reviewed",
                "reviewed_only",
                "detector_only",
                name="label_stream",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column(
            "protocol",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("code_version", sa.String(length=64), nullable=False),
        sa.Column("data_version", sa.String(length=64), nullable=False),
        sa.Column(
            "result",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_by_id", sa.Integer(), nullable=True),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["campaigns.id"],
            name=op.f("fk_analysis_snapshots_campaign_id_campaigns"),
        ),
        sa.ForeignKeyConstraint(
            ["created_by_id"], ["users.id"], name=op.f("fk_analysis_snapshots_created_by_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_analysis_snapshots")),
    )
    with op.batch_alter_table("analysis_snapshots", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_analysis_snapshots_campaign_id"), ["campaign_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_analysis_snapshots_data_version"), ["data_version"], unique=False
        )

    op.create_table(
        "campaign_objects",
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("object_type_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["campaigns.id"],
            name=op.f("fk_campaign_objects_campaign_id_campaigns"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["object_type_id"],
            ["object_types.id"],
            name=op.f("fk_campaign_objects_object_type_id_object_types"),
        ),
        sa.PrimaryKeyConstraint("campaign_id", "object_type_id", name=op.f("pk_campaign_objects")),
    )
    op.create_table(
        "submissions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("policy_id", sa.Integer(), nullable=False),
        sa.Column(
            "kind",
            sa.Enum(
                "checkpoint",
                "endpoint",
                name="submission_kind",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("checkpoint_artifact_id", sa.Integer(), nullable=True),
        sa.Column("checkpoint_sha256", sa.String(length=64), nullable=True),
        sa.Column(
            "manifest",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("endpoint_url", sa.String(length=512), nullable=True),
        sa.Column(
            "endpoint_dialect",
            sa.Enum(
                "openpi",
                "roboarena",
                "positronic_v1",
                name="endpoint_dialect",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=True,
        ),
        sa.Column("endpoint_api_key_encrypted", sa.LargeBinary(), nullable=True),
        sa.Column(
            "conformance_status",
            sa.Enum(
                "pending",
                "passed",
                "failed",
                name="conformance_status",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column(
            "conformance_report",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("submitted_by_id", sa.Integer(), nullable=True),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(kind = 'checkpoint' AND checkpoint_sha256 IS NOT NULL) OR (kind = 'endpoint' AND endpoint_url IS NOT NULL)",
            name=op.f("ck_submissions_kind_has_payload"),
        ),
        sa.ForeignKeyConstraint(
            ["policy_id"], ["policies.id"], name=op.f("fk_submissions_policy_id_policies")
        ),
        sa.ForeignKeyConstraint(
            ["submitted_by_id"], ["users.id"], name=op.f("fk_submissions_submitted_by_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_submissions")),
    )
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_submissions_policy_id"), ["policy_id"], unique=False)

    op.create_table(
        "assignments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("run_code", sa.String(length=16), nullable=False),
        sa.Column("endpoint_handle", sa.String(length=64), nullable=False),
        sa.Column("policy_id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=True),
        sa.Column("object_type_id", sa.Integer(), nullable=False),
        sa.Column(
            "tote_side",
            sa.Enum(
                "left",
                "right",
                name="tote_side",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column(
            "camera_side",
            sa.Enum(
                "left",
                "right",
                name="camera_side",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("block_index", sa.Integer(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "pending",
                "claimed",
                "done",
                "skipped",
                "requeued",
                name="assignment_status",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("station_id", sa.Integer(), nullable=True),
        sa.Column("claimed_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("completed_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("replaces_id", sa.Integer(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["campaign_id"], ["campaigns.id"], name=op.f("fk_assignments_campaign_id_campaigns")
        ),
        sa.ForeignKeyConstraint(
            ["object_type_id"],
            ["object_types.id"],
            name=op.f("fk_assignments_object_type_id_object_types"),
        ),
        sa.ForeignKeyConstraint(
            ["policy_id"], ["policies.id"], name=op.f("fk_assignments_policy_id_policies")
        ),
        sa.ForeignKeyConstraint(
            ["replaces_id"], ["assignments.id"], name=op.f("fk_assignments_replaces_id_assignments")
        ),
        sa.ForeignKeyConstraint(
            ["station_id"], ["stations.id"], name=op.f("fk_assignments_station_id_stations")
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_assignments_submission_id_submissions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_assignments")),
        sa.UniqueConstraint("campaign_id", "sequence", name="uq_assignments_campaign_sequence"),
        sa.UniqueConstraint("endpoint_handle", name=op.f("uq_assignments_endpoint_handle")),
        sa.UniqueConstraint("run_code", name=op.f("uq_assignments_run_code")),
    )
    with op.batch_alter_table("assignments", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_assignments_campaign_id"), ["campaign_id"], unique=False
        )
        batch_op.create_index(
            "ix_assignments_campaign_status_sequence",
            ["campaign_id", "status", "sequence"],
            unique=False,
        )
        batch_op.create_index(batch_op.f("ix_assignments_policy_id"), ["policy_id"], unique=False)

    op.create_table(
        "campaign_policies",
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("policy_id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["campaigns.id"],
            name=op.f("fk_campaign_policies_campaign_id_campaigns"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["policy_id"], ["policies.id"], name=op.f("fk_campaign_policies_policy_id_policies")
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_campaign_policies_submission_id_submissions"),
        ),
        sa.PrimaryKeyConstraint("campaign_id", "policy_id", name=op.f("pk_campaign_policies")),
    )
    op.create_table(
        "episodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uid", sa.String(length=32), nullable=False),
        sa.Column("station_id", sa.Integer(), nullable=True),
        sa.Column("assignment_id", sa.Integer(), nullable=True),
        sa.Column("campaign_id", sa.Integer(), nullable=True),
        sa.Column("run_code", sa.String(length=16), nullable=True),
        sa.Column("object_type_id", sa.Integer(), nullable=False),
        sa.Column("items", sa.Integer(), nullable=False),
        sa.Column("budget_s", sa.Double(), nullable=False),
        sa.Column(
            "tote_side",
            sa.Enum(
                "left",
                "right",
                name="tote_side",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column(
            "camera_side",
            sa.Enum(
                "left",
                "right",
                name="camera_side",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("sim_seed", sa.Integer(), nullable=True),
        sa.Column(
            "state",
            sa.Enum(
                "armed",
                "running",
                "finishing",
                "awaiting_log",
                "closed",
                "interrupted",
                name="episode_state",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("clock_start_s", sa.Double(), nullable=True),
        sa.Column("clock_end_s", sa.Double(), nullable=True),
        sa.Column("started_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("ended_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column(
            "outcome",
            sa.Enum(
                "success",
                "ran_out_of_time",
                "operator_stop",
                "safety",
                "system",
                name="outcome",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=True,
        ),
        sa.Column("outcome_reason", sa.Text(), nullable=False),
        sa.Column("placed", sa.Integer(), nullable=True),
        sa.Column("lost", sa.Integer(), nullable=True),
        sa.Column("dropped", sa.Integer(), nullable=True),
        sa.Column("operator_notes", sa.Text(), nullable=False),
        sa.Column("operator_id", sa.Integer(), nullable=True),
        sa.Column("logged_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column(
            "label_status",
            sa.Enum(
                "pending",
                "auto",
                "needs_review",
                "reviewed",
                "flagged",
                name="label_status",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(placed IS NULL AND lost IS NULL AND dropped IS NULL) OR (placed >= 0 AND lost >= 0 AND dropped >= 0 AND placed + lost + dropped <= items)",
            name=op.f("ck_episodes_counts_within_items"),
        ),
        sa.CheckConstraint("budget_s > 0", name=op.f("ck_episodes_budget_positive")),
        sa.CheckConstraint("items > 0", name=op.f("ck_episodes_items_positive")),
        sa.ForeignKeyConstraint(
            ["assignment_id"],
            ["assignments.id"],
            name=op.f("fk_episodes_assignment_id_assignments"),
        ),
        sa.ForeignKeyConstraint(
            ["campaign_id"], ["campaigns.id"], name=op.f("fk_episodes_campaign_id_campaigns")
        ),
        sa.ForeignKeyConstraint(
            ["object_type_id"],
            ["object_types.id"],
            name=op.f("fk_episodes_object_type_id_object_types"),
        ),
        sa.ForeignKeyConstraint(
            ["operator_id"], ["users.id"], name=op.f("fk_episodes_operator_id_users")
        ),
        sa.ForeignKeyConstraint(
            ["station_id"], ["stations.id"], name=op.f("fk_episodes_station_id_stations")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_episodes")),
        sa.UniqueConstraint("uid", name=op.f("uq_episodes_uid")),
    )
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_episodes_assignment_id"), ["assignment_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_episodes_campaign_id"), ["campaign_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_episodes_label_status"), ["label_status"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_episodes_object_type_id"), ["object_type_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_episodes_run_code"), ["run_code"], unique=False)
        batch_op.create_index(batch_op.f("ix_episodes_station_id"), ["station_id"], unique=False)

    op.create_table(
        "annotation_candidates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("episode_id", sa.Integer(), nullable=False),
        sa.Column("t_s", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("zone", sa.String(length=16), nullable=False),
        sa.Column(
            "features",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "verdict",
            sa.Enum(
                "success",
                "failure",
                "neutral",
                "unknown",
                name="candidate_verdict",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("rule", sa.String(length=128), nullable=False),
        sa.Column("score", sa.Double(), nullable=True),
        sa.Column("detector_version", sa.String(length=32), nullable=False),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episodes.id"],
            name=op.f("fk_annotation_candidates_episode_id_episodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_annotation_candidates")),
    )
    with op.batch_alter_table("annotation_candidates", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_annotation_candidates_episode_id"), ["episode_id"], unique=False
        )

    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("episode_id", sa.Integer(), nullable=True),
        sa.Column(
            "kind",
            sa.Enum(
                "video",
                "frame_index",
                "telemetry",
                "rrd",
                "manifest",
                "checkpoint",
                "ground_truth",
                "photo",
                name="artifact_kind",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("camera", sa.String(length=32), nullable=True),
        sa.Column("uri", sa.String(length=1024), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("media_type", sa.String(length=128), nullable=False),
        sa.Column("frame_count", sa.Integer(), nullable=True),
        sa.Column(
            "details",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint("size_bytes >= 0", name=op.f("ck_artifacts_size_nonnegative")),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name=op.f("fk_artifacts_episode_id_episodes")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifacts")),
    )
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_artifacts_episode_id"), ["episode_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_artifacts_sha256"), ["sha256"], unique=False)

    # added after artifacts exists: submissions → artifacts closes a cycle of foreign keys
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.create_foreign_key(
            batch_op.f("fk_submissions_checkpoint_artifact_id_artifacts"),
            "artifacts",
            ["checkpoint_artifact_id"],
            ["id"],
        )

    op.create_table(
        "episode_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("episode_id", sa.Integer(), nullable=False),
        sa.Column("t_s", sa.Double(), nullable=True),
        sa.Column("at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column(
            "details",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episodes.id"],
            name=op.f("fk_episode_events_episode_id_episodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_episode_events")),
    )
    with op.batch_alter_table("episode_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_episode_events_episode_id"), ["episode_id"], unique=False
        )

    op.create_table(
        "placement_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("episode_id", sa.Integer(), nullable=False),
        sa.Column("t_s", sa.Double(), nullable=False),
        sa.Column(
            "source",
            sa.Enum(
                "detector",
                "reviewer",
                "ground_truth",
                name="placement_source",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column(
            "status",
            sa.Enum(
                "proposed",
                "accepted",
                "confirmed",
                "rejected",
                "superseded",
                name="placement_status",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("candidate_id", sa.Integer(), nullable=True),
        sa.Column("created_at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["candidate_id"],
            ["annotation_candidates.id"],
            name=op.f("fk_placement_events_candidate_id_annotation_candidates"),
        ),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episodes.id"],
            name=op.f("fk_placement_events_episode_id_episodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_placement_events")),
    )
    with op.batch_alter_table("placement_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_placement_events_episode_id"), ["episode_id"], unique=False
        )

    op.create_table(
        "review_actions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("episode_id", sa.Integer(), nullable=False),
        sa.Column("reviewer_id", sa.Integer(), nullable=True),
        sa.Column("reviewer_label", sa.String(length=128), nullable=False),
        sa.Column("at", proctor.core.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column(
            "action",
            sa.Enum(
                "confirm",
                "move",
                "reject",
                "add",
                "flag_count",
                "resolve_flag",
                "correct_log",
                name="review_action_kind",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("placement_event_id", sa.Integer(), nullable=True),
        sa.Column(
            "before",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "after",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("note", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name=op.f("fk_review_actions_episode_id_episodes")
        ),
        sa.ForeignKeyConstraint(
            ["placement_event_id"],
            ["placement_events.id"],
            name=op.f("fk_review_actions_placement_event_id_placement_events"),
        ),
        sa.ForeignKeyConstraint(
            ["reviewer_id"], ["users.id"], name=op.f("fk_review_actions_reviewer_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_review_actions")),
    )
    with op.batch_alter_table("review_actions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_review_actions_episode_id"), ["episode_id"], unique=False
        )

    _create_append_only_triggers()


def downgrade() -> None:
    _drop_append_only_triggers()
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_submissions_checkpoint_artifact_id_artifacts"), type_="foreignkey"
        )
    with op.batch_alter_table("review_actions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_review_actions_episode_id"))

    op.drop_table("review_actions")
    with op.batch_alter_table("placement_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_placement_events_episode_id"))

    op.drop_table("placement_events")
    with op.batch_alter_table("episode_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_episode_events_episode_id"))

    op.drop_table("episode_events")
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_artifacts_sha256"))
        batch_op.drop_index(batch_op.f("ix_artifacts_episode_id"))

    op.drop_table("artifacts")
    with op.batch_alter_table("annotation_candidates", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_annotation_candidates_episode_id"))

    op.drop_table("annotation_candidates")
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_episodes_station_id"))
        batch_op.drop_index(batch_op.f("ix_episodes_run_code"))
        batch_op.drop_index(batch_op.f("ix_episodes_object_type_id"))
        batch_op.drop_index(batch_op.f("ix_episodes_label_status"))
        batch_op.drop_index(batch_op.f("ix_episodes_campaign_id"))
        batch_op.drop_index(batch_op.f("ix_episodes_assignment_id"))

    op.drop_table("episodes")
    op.drop_table("campaign_policies")
    with op.batch_alter_table("assignments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_assignments_policy_id"))
        batch_op.drop_index("ix_assignments_campaign_status_sequence")
        batch_op.drop_index(batch_op.f("ix_assignments_campaign_id"))

    op.drop_table("assignments")
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_submissions_policy_id"))

    op.drop_table("submissions")
    op.drop_table("campaign_objects")
    with op.batch_alter_table("analysis_snapshots", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_analysis_snapshots_data_version"))
        batch_op.drop_index(batch_op.f("ix_analysis_snapshots_campaign_id"))

    op.drop_table("analysis_snapshots")
    op.drop_table("user_roles")
    with op.batch_alter_table("policies", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_policies_owner_id"))

    op.drop_table("policies")
    op.drop_table("campaigns")
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_log_action"))

    op.drop_table("audit_log")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_tokens_user_id"))

    op.drop_table("api_tokens")
    op.drop_table("users")
    op.drop_table("stations")
    op.drop_table("object_types")


APPEND_ONLY_TABLES = ("review_actions", "audit_log")


def _create_append_only_triggers() -> None:
    """Refuse UPDATE and DELETE on append-only tables from any client, not
    just through the ORM guard."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION proctor_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION '% is append-only', TG_TABLE_NAME; END $$"
        )
        for table in APPEND_ONLY_TABLES:
            op.execute(
                f"CREATE TRIGGER trg_{table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION proctor_append_only()"
            )
    else:
        for table in APPEND_ONLY_TABLES:
            for verb in ("update", "delete"):
                op.execute(
                    f"CREATE TRIGGER trg_{table}_no_{verb} BEFORE {verb.upper()} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"
                )


def _drop_append_only_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in APPEND_ONLY_TABLES:
            op.execute(f"DROP TRIGGER trg_{table}_append_only ON {table}")
        op.execute("DROP FUNCTION proctor_append_only()")
    else:
        for table in APPEND_ONLY_TABLES:
            for verb in ("update", "delete"):
                op.execute(f"DROP TRIGGER trg_{table}_no_{verb}")
