"""Detector candidates, placement events and the append-only review log."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from proctor.core.db.models.base import Base, created_at_column
from proctor.core.db.types import JSONType, enum_column
from proctor.core.domain import (
    CandidateVerdict,
    PlacementSource,
    PlacementStatus,
    ReviewActionKind,
)


class AnnotationCandidate(Base):
    """A release (or slump) the detector found in the telemetry, with the
    features it computed and the verdict and rule that classified it."""

    __tablename__ = "annotation_candidates"

    id: Mapped[int] = mapped_column(primary_key=True)
    episode_id: Mapped[int] = mapped_column(
        sa.ForeignKey("episodes.id", ondelete="CASCADE"), index=True
    )
    t_s: Mapped[float]  # seconds since episode start, station clock
    kind: Mapped[str] = mapped_column(sa.String(16))  # "release" | "slump"
    zone: Mapped[str] = mapped_column(sa.String(16), default="")  # target | source | elsewhere
    features: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    verdict: Mapped[CandidateVerdict] = mapped_column(
        enum_column(CandidateVerdict, "candidate_verdict")
    )
    rule: Mapped[str] = mapped_column(sa.String(128), default="")
    score: Mapped[float | None]
    detector_version: Mapped[str] = mapped_column(sa.String(32), default="")
    created_at: Mapped[datetime] = created_at_column()


class PlacementEvent(Base):
    """A time at which an item landed in the target bin.

    Both label streams live here side by side: detector rows (``accepted``
    when the counts reconciled) and reviewer rows (``confirmed``). Nothing is
    deleted; a move supersedes the old row and adds a new one.
    """

    __tablename__ = "placement_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    episode_id: Mapped[int] = mapped_column(
        sa.ForeignKey("episodes.id", ondelete="CASCADE"), index=True
    )
    t_s: Mapped[float]
    source: Mapped[PlacementSource] = mapped_column(
        enum_column(PlacementSource, "placement_source")
    )
    status: Mapped[PlacementStatus] = mapped_column(
        enum_column(PlacementStatus, "placement_status")
    )
    candidate_id: Mapped[int | None] = mapped_column(sa.ForeignKey("annotation_candidates.id"))
    created_at: Mapped[datetime] = created_at_column()


class ReviewAction(Base):
    """One reviewer action. Append-only: never updated or deleted."""

    __tablename__ = "review_actions"

    id: Mapped[int] = mapped_column(primary_key=True)
    episode_id: Mapped[int] = mapped_column(sa.ForeignKey("episodes.id"), index=True)
    reviewer_id: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id"))
    # set when no person acted (e.g. the demo's labelled automatic reviewer)
    reviewer_label: Mapped[str] = mapped_column(sa.String(128), default="")
    at: Mapped[datetime] = created_at_column()
    action: Mapped[ReviewActionKind] = mapped_column(
        enum_column(ReviewActionKind, "review_action_kind")
    )
    placement_event_id: Mapped[int | None] = mapped_column(sa.ForeignKey("placement_events.id"))
    before: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    after: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    note: Mapped[str] = mapped_column(sa.Text, default="")
