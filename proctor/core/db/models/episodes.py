"""Episodes, what happened during them, and the artifacts they left."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from proctor.core.db.models.base import Base, created_at_column
from proctor.core.db.types import JSONType, UTCDateTime, enum_column
from proctor.core.domain import ArtifactKind, EpisodeState, LabelStatus, Outcome, Side


class Episode(Base):
    """One rollout of one policy (via its assignment) on one object type.

    Times come in two forms: ``clock_*_s`` on the station's monotonic clock
    (the clock every recorded sample carries) and ``started_at``/``ended_at``
    on the wall clock. The operator's counts are the source of truth for how
    many items were placed; the annotator supplies when.
    """

    __tablename__ = "episodes"
    __table_args__ = (
        sa.CheckConstraint("items > 0", name="items_positive"),
        sa.CheckConstraint(
            "(placed IS NULL AND lost IS NULL AND dropped IS NULL)"
            " OR (placed >= 0 AND lost >= 0 AND dropped >= 0"
            " AND placed + lost + dropped <= items)",
            name="counts_within_items",
        ),
        sa.CheckConstraint("budget_s > 0", name="budget_positive"),
        sa.CheckConstraint(
            "envelope_interventions IS NULL OR envelope_interventions >= 0",
            name="envelope_interventions_nonnegative",
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    # a random, non-sequential identifier, safe to show in URLs and exports
    uid: Mapped[str] = mapped_column(sa.String(32), unique=True)
    station_id: Mapped[int | None] = mapped_column(sa.ForeignKey("stations.id"), index=True)
    assignment_id: Mapped[int | None] = mapped_column(sa.ForeignKey("assignments.id"), index=True)
    campaign_id: Mapped[int | None] = mapped_column(sa.ForeignKey("campaigns.id"), index=True)
    run_code: Mapped[str | None] = mapped_column(sa.String(16), index=True)
    object_type_id: Mapped[int] = mapped_column(sa.ForeignKey("object_types.id"), index=True)
    items: Mapped[int]
    budget_s: Mapped[float]
    tote_side: Mapped[Side] = mapped_column(enum_column(Side, "tote_side"))
    camera_side: Mapped[Side] = mapped_column(enum_column(Side, "camera_side"))
    sim_seed: Mapped[int | None]  # simulated cell only
    state: Mapped[EpisodeState] = mapped_column(
        enum_column(EpisodeState, "episode_state"), default=EpisodeState.armed
    )
    clock_start_s: Mapped[float | None]
    clock_end_s: Mapped[float | None]
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    outcome: Mapped[Outcome | None] = mapped_column(enum_column(Outcome, "outcome"))
    # why: the fault text for safety/system endings, the stop reason otherwise
    outcome_reason: Mapped[str] = mapped_column(sa.Text, default="")
    # commands the station's safety envelope clamped or stopped (the manifest's
    # ``envelope.interventions``); NULL = not recorded (older stations, a crashed
    # episode's recovery), never read as zero
    envelope_interventions: Mapped[int | None]
    placed: Mapped[int | None]
    lost: Mapped[int | None]
    dropped: Mapped[int | None]
    operator_notes: Mapped[str] = mapped_column(sa.Text, default="")
    operator_id: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id"))
    logged_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    label_status: Mapped[LabelStatus] = mapped_column(
        enum_column(LabelStatus, "label_status"), default=LabelStatus.pending, index=True
    )
    # the station's revision of this episode last synced over the station API
    # (None: written here directly): an older or repeated one changes nothing
    sync_rev: Mapped[int | None]
    # the server's time of the last snapshot (or running heartbeat) the station
    # sent over the station API (None: written here directly): a live episode
    # heard from within the claim lease holds its run against a second claim
    synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = created_at_column()

    artifacts: Mapped[list[Artifact]] = relationship(
        back_populates="episode", order_by="Artifact.id"
    )
    events: Mapped[list[EpisodeEvent]] = relationship(
        back_populates="episode", order_by="EpisodeEvent.id"
    )

    @property
    def duration_s(self) -> float | None:
        if self.clock_start_s is None or self.clock_end_s is None:
            return None
        return self.clock_end_s - self.clock_start_s


class EpisodeEvent(Base):
    """The operator and station log of an episode: armed, started, stops,
    faults, policy errors, the post-rollout log. Shown in the run explorer."""

    __tablename__ = "episode_events"
    __table_args__ = (
        sa.UniqueConstraint(
            "episode_id", "station_seq", name="uq_episode_events_episode_station_seq"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    episode_id: Mapped[int] = mapped_column(
        sa.ForeignKey("episodes.id", ondelete="CASCADE"), index=True
    )
    t_s: Mapped[float | None]  # seconds since episode start, station clock
    at: Mapped[datetime] = created_at_column()
    kind: Mapped[str] = mapped_column(sa.String(32))
    message: Mapped[str] = mapped_column(sa.Text, default="")
    details: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # the event's place in the station's own ledger (station API): a re-sent
    # episode adds each event once; None for events written here directly
    station_seq: Mapped[int | None]

    episode: Mapped[Episode] = relationship(back_populates="events")


class Artifact(Base):
    """A stored file: content addressed by sha256 in the artifact store."""

    __tablename__ = "artifacts"
    __table_args__ = (sa.CheckConstraint("size_bytes >= 0", name="size_nonnegative"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    episode_id: Mapped[int | None] = mapped_column(sa.ForeignKey("episodes.id"), index=True)
    kind: Mapped[ArtifactKind] = mapped_column(enum_column(ArtifactKind, "artifact_kind"))
    camera: Mapped[str | None] = mapped_column(sa.String(32))  # "exterior" | "wrist"
    uri: Mapped[str] = mapped_column(sa.String(1024))
    sha256: Mapped[str] = mapped_column(sa.String(64), index=True)
    size_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    media_type: Mapped[str] = mapped_column(sa.String(128), default="application/octet-stream")
    frame_count: Mapped[int | None]
    details: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = created_at_column()

    episode: Mapped[Episode | None] = relationship(back_populates="artifacts")
