"""Campaigns and their blinded, sealed allocation."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from proctor.core.db.models.base import Base, created_at_column
from proctor.core.db.types import JSONType, UTCDateTime, enum_column
from proctor.core.domain import AssignmentStatus, CampaignStatus, Side


class Campaign(Base):
    """A protocol and its allocation.

    ``seed_commitment`` (SHA-256 of the allocation seed) is published when the
    campaign starts; ``allocation_seed`` stays sealed until it closes, so
    anyone can then re-derive the allocation and check it against the log.
    """

    __tablename__ = "campaigns"
    __table_args__ = (
        sa.CheckConstraint("items_per_episode > 0", name="items_positive"),
        sa.CheckConstraint("per_item_cap_s > 0", name="cap_positive"),
        sa.CheckConstraint("tau_s > 0", name="tau_positive"),
        sa.CheckConstraint("episodes_per_cell > 0", name="episodes_per_cell_positive"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(128), unique=True)
    description: Mapped[str] = mapped_column(sa.Text, default="")
    status: Mapped[CampaignStatus] = mapped_column(
        enum_column(CampaignStatus, "campaign_status"), default=CampaignStatus.draft
    )
    items_per_episode: Mapped[int]
    per_item_cap_s: Mapped[float]  # time budget per item; episode budget = items × cap
    tau_s: Mapped[float]  # RMST integration cap, disclosed with every result
    episodes_per_cell: Mapped[int]  # target per (policy, object) cell
    # [{"tote": "left", "camera": "right"}, ...]: the configurations to balance
    spatial_configs: Mapped[list[dict[str, str]]] = mapped_column(JSONType, default=list)
    protocol_extra: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # {"budget_ms": float, "tolerance": int}: the policy's round trip bounded
    # (proctor.scheduler.protocol.LatencyBudgetEntry); None: measured, not enforced
    latency_budget: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # the cell profiles whose stations may run it (``Station.cell_profile``),
    # sorted; None: any station
    cell_profiles: Mapped[list[str] | None] = mapped_column(JSONType)
    seed_commitment: Mapped[str | None] = mapped_column(sa.String(64))
    allocation_seed: Mapped[str | None] = mapped_column(sa.String(128))  # sealed until closed
    # the exact input of the allocation derivation, frozen when the campaign starts
    # (proctor/scheduler/allocation.py: canonical policy and object ids, configs, algorithm)
    allocation_protocol: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # {"sentinels": [policy ids], "adaptive": {rule, alpha, lag_blocks} | null}, from the
    # protocol at creation; start folds it into allocation_protocol (committed with the seed)
    allocation_rule: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_by_id: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id"))
    created_at: Mapped[datetime] = created_at_column()
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    policies: Mapped[list[CampaignPolicy]] = relationship(
        back_populates="campaign", cascade="all, delete-orphan"
    )
    objects: Mapped[list[CampaignObject]] = relationship(
        back_populates="campaign", cascade="all, delete-orphan"
    )


class CampaignPolicy(Base):
    __tablename__ = "campaign_policies"

    campaign_id: Mapped[int] = mapped_column(
        sa.ForeignKey("campaigns.id", ondelete="CASCADE"), primary_key=True
    )
    policy_id: Mapped[int] = mapped_column(sa.ForeignKey("policies.id"), primary_key=True)
    # the version evaluated; None for the human reference
    submission_id: Mapped[int | None] = mapped_column(sa.ForeignKey("submissions.id"))
    active: Mapped[bool] = mapped_column(default=True)

    campaign: Mapped[Campaign] = relationship(back_populates="policies")


class CampaignObject(Base):
    __tablename__ = "campaign_objects"

    campaign_id: Mapped[int] = mapped_column(
        sa.ForeignKey("campaigns.id", ondelete="CASCADE"), primary_key=True
    )
    object_type_id: Mapped[int] = mapped_column(sa.ForeignKey("object_types.id"), primary_key=True)

    campaign: Mapped[Campaign] = relationship(back_populates="objects")


class Assignment(Base):
    """One slot of the allocation: which policy runs under an opaque run code.

    The run code and endpoint handle reveal nothing; the code ↔ policy mapping
    is read only by the scheduler and by audited unblinding.
    """

    __tablename__ = "assignments"
    __table_args__ = (
        sa.UniqueConstraint("campaign_id", "sequence", name="uq_assignments_campaign_sequence"),
        sa.Index("ix_assignments_campaign_status_sequence", "campaign_id", "status", "sequence"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    campaign_id: Mapped[int] = mapped_column(sa.ForeignKey("campaigns.id"), index=True)
    run_code: Mapped[str] = mapped_column(sa.String(16), unique=True)
    endpoint_handle: Mapped[str] = mapped_column(sa.String(64), unique=True)
    policy_id: Mapped[int] = mapped_column(sa.ForeignKey("policies.id"), index=True)
    submission_id: Mapped[int | None] = mapped_column(sa.ForeignKey("submissions.id"))
    object_type_id: Mapped[int] = mapped_column(sa.ForeignKey("object_types.id"))
    tote_side: Mapped[Side] = mapped_column(enum_column(Side, "tote_side"))
    camera_side: Mapped[Side] = mapped_column(enum_column(Side, "camera_side"))
    block_index: Mapped[int]
    slot: Mapped[int]  # position within the block
    sequence: Mapped[int]  # global order within the campaign
    status: Mapped[AssignmentStatus] = mapped_column(
        enum_column(AssignmentStatus, "assignment_status"), default=AssignmentStatus.pending
    )
    station_id: Mapped[int | None] = mapped_column(sa.ForeignKey("stations.id"))
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # a requeued (system) or skipped slot points at its replacement's origin
    replaces_id: Mapped[int | None] = mapped_column(sa.ForeignKey("assignments.id"))
    attempt: Mapped[int] = mapped_column(default=1)
    # a slot rescheduled after a failed pre-flight waits until then before it is claimable
    not_before: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = created_at_column()
