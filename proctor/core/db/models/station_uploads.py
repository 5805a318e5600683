"""Artifact uploads from station hosts, in progress or done
(``proctor.scheduler.station_uploads``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from proctor.core.db.models.base import Base, created_at_column
from proctor.core.db.types import JSONType, UTCDateTime, enum_column
from proctor.core.domain import ArtifactKind, StationUploadState

_OPEN_SQL = "state = 'open'"


class StationUpload(Base):
    """One artifact a station sends to the store in parts. The bytes never
    pass through this row: it names the store's multipart upload
    (``backend_id``) and what the station declared, which the server checks
    against the joined parts before the ``Artifact`` row exists."""

    __tablename__ = "station_uploads"
    __table_args__ = (
        sa.CheckConstraint("size_bytes >= 0", name="size_nonnegative"),
        sa.CheckConstraint("part_size > 0", name="part_size_positive"),
        # one open upload per artifact of an episode: a repeated begin resumes it
        sa.Index(
            "uq_station_uploads_open_artifact",
            "episode_id",
            "sha256",
            unique=True,
            sqlite_where=sa.text(_OPEN_SQL),
            postgresql_where=sa.text(_OPEN_SQL),
        ),
    )

    # random, unguessable: it names the staging place in the store too
    id: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    station_id: Mapped[int] = mapped_column(
        sa.ForeignKey("stations.id", ondelete="CASCADE"), index=True
    )
    episode_id: Mapped[int] = mapped_column(
        sa.ForeignKey("episodes.id", ondelete="CASCADE"), index=True
    )
    sha256: Mapped[str] = mapped_column(sa.String(64))
    size_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    kind: Mapped[ArtifactKind] = mapped_column(enum_column(ArtifactKind, "upload_artifact_kind"))
    camera: Mapped[str | None] = mapped_column(sa.String(32))
    media_type: Mapped[str] = mapped_column(sa.String(128))
    frame_count: Mapped[int | None]
    details: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    part_size: Mapped[int] = mapped_column(sa.BigInteger)
    # the store's id of its multipart upload (S3's UploadId: long)
    backend_id: Mapped[str] = mapped_column(sa.String(1024))
    state: Mapped[StationUploadState] = mapped_column(
        enum_column(StationUploadState, "station_upload_state"),
        default=StationUploadState.open,
    )
    # the artifact it became (state complete)
    artifact_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("artifacts.id", ondelete="SET NULL")
    )
    created_at: Mapped[datetime] = created_at_column()
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
