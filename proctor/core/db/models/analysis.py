"""Stored leaderboard snapshots: what the public pages read."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from proctor.core.db.models.base import Base, created_at_column
from proctor.core.db.types import JSONType, enum_column
from proctor.core.domain import LabelStream


class AnalysisSnapshot(Base):
    """One computed leaderboard, reproducible from what it records: the
    protocol (τ, B, seed, …), the code version, and a hash of the input
    episodes and labels (``data_version``)."""

    __tablename__ = "analysis_snapshots"

    id: Mapped[int] = mapped_column(primary_key=True)
    campaign_id: Mapped[int | None] = mapped_column(sa.ForeignKey("campaigns.id"), index=True)
    label_stream: Mapped[LabelStream] = mapped_column(enum_column(LabelStream, "label_stream"))
    protocol: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    code_version: Mapped[str] = mapped_column(sa.String(64))
    data_version: Mapped[str] = mapped_column(sa.String(64), index=True)
    result: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_by_id: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id"))
    created_at: Mapped[datetime] = created_at_column()


class AnalysisSubsetResult(Base):
    """One documented factor level of a snapshot, scored with it
    (``proctor.analysis.store.build_snapshot``): the board on only the
    episodes at ``factor = level``, so the public's filtered boards are read,
    never computed on request (``proctor.web.leaderboard.subset``). ``result``
    is None when the subset was too small to score; ``message`` says why."""

    __tablename__ = "analysis_subset_results"
    __table_args__ = (
        sa.UniqueConstraint(
            "snapshot_id", "factor", "level", name="uq_analysis_subset_results_level"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    snapshot_id: Mapped[int] = mapped_column(
        sa.ForeignKey("analysis_snapshots.id", ondelete="CASCADE"), index=True
    )
    factor: Mapped[str] = mapped_column(sa.String(32))
    level: Mapped[str] = mapped_column(sa.String(200))
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    message: Mapped[str] = mapped_column(sa.Text, default="")
