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
