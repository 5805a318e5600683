"""Stations' credentials: the bearer token a station host proves itself with."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from proctor.core.db.models.base import Base, created_at_column
from proctor.core.db.types import UTCDateTime


class StationToken(Base):
    """One token of one station (``proctor.core.station_credentials``). Only
    its SHA-256 is stored; the token is shown once, at enrolment or rotation.
    A station has more than one live token only during a rotation window: the
    old one then carries ``expires_at``."""

    __tablename__ = "station_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    station_id: Mapped[int] = mapped_column(
        sa.ForeignKey("stations.id", ondelete="CASCADE"), index=True
    )
    # first characters of the token, so an admin can tell a station's tokens apart
    prefix: Mapped[str] = mapped_column(sa.String(16))
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[datetime] = created_at_column()
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # the gateway's last accepted connection with it: during a rotation, whether
    # the station host has moved to the new token yet
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
