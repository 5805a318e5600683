"""The station API's answers to requests that change something, kept by key."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from proctor.core.db.models.base import Base, created_at_column
from proctor.core.db.types import JSONType


class StationRequest(Base):
    """One station's request under its ``Idempotency-Key``, with the answer
    it got: a repeated key (a retry after a lost reply) is answered from here
    and acts no second time."""

    __tablename__ = "station_requests"
    __table_args__ = (
        sa.UniqueConstraint("station_id", "key", name="uq_station_requests_station_key"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    station_id: Mapped[int] = mapped_column(sa.ForeignKey("stations.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(sa.String(128))
    # "POST /claims": the same key sent for another call is a conflict, not a replay
    route: Mapped[str] = mapped_column(sa.String(256))
    status_code: Mapped[int]
    response: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = created_at_column()
