"""Annotating an episode: detector candidates into the database, reconciled
with the operator's count.

Only a ``closed`` episode with an operator log (``placed`` set) is
annotated, once (its label status is ``pending``). Every candidate becomes
an ``AnnotationCandidate`` row (features, verdict, rule, score, detector
version); every ``success`` candidate also becomes a detector
``PlacementEvent``. Then:

* the detector's success count equals the operator's ``placed`` → the
  detector's times are **accepted** (status ``accepted``) and the episode's
  label status becomes ``auto`` (label stream "auto");
* otherwise the detector's times stay ``proposed`` and the episode goes to
  the review queue (``needs_review``).

Nothing is ever deleted: the detector's rows stay beside the reviewer's
(``proctor.annotator.review``) forever, so the analysis can read either stream.
Service functions take a keyword-only ``session`` and never commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import sqlalchemy as sa

from proctor.annotator.config import Thresholds
from proctor.annotator.pipeline import Classified, analyze_table
from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import (
    AnnotationCandidate,
    Artifact,
    Episode,
    EpisodeEvent,
    PlacementEvent,
)
from proctor.core.domain import (
    ArtifactKind,
    EpisodeState,
    LabelStatus,
    PlacementSource,
    PlacementStatus,
)
from proctor.core.errors import IntegrityError, ProctorError, UsageError
from proctor.core.recording.reader import read_json, read_parquet


class NotAnnotatable(UsageError):
    """The episode cannot be annotated (yet): the message says why."""


class AlreadyAnnotated(ProctorError):
    exit_code = 2


@dataclass(frozen=True)
class AnnotationResult:
    uid: str
    label_status: LabelStatus
    candidates: int
    successes: int
    placed: int
    note: str = ""


def find_episode(session: ProctorSession, uid: str) -> Episode:
    episode = session.scalar(sa.select(Episode).where(Episode.uid == uid))
    if episode is None:
        raise UsageError(f"episode: no episode '{uid}'")
    return episode


def check_annotatable(episode: Episode) -> None:
    if episode.state != EpisodeState.closed:
        raise NotAnnotatable(
            f"episode {episode.uid}: is {episode.state.value}; only closed episodes "
            "(with the operator's log) are annotated"
        )
    if episode.placed is None:
        raise NotAnnotatable(f"episode {episode.uid}: has no operator log (placed count)")
    if episode.clock_start_s is None:
        raise NotAnnotatable(f"episode {episode.uid}: never started (no clock start)")
    if episode.label_status != LabelStatus.pending:
        raise AlreadyAnnotated(
            f"episode {episode.uid}: already annotated (label status "
            f"{LabelStatus(episode.label_status).value})"
        )


def pending_episodes(session: ProctorSession) -> list[Episode]:
    """Closed, logged, not yet annotated: oldest first."""
    return list(
        session.scalars(
            sa.select(Episode)
            .where(
                Episode.state == EpisodeState.closed,
                Episode.placed.is_not(None),
                Episode.clock_start_s.is_not(None),
                Episode.label_status == LabelStatus.pending,
            )
            .order_by(Episode.id)
        )
    )


def _artifact(session: ProctorSession, episode: Episode, kind: ArtifactKind) -> Artifact | None:
    return session.scalar(
        sa.select(Artifact)
        .where(Artifact.episode_id == episode.id, Artifact.kind == kind)
        .order_by(Artifact.id.desc())
        .limit(1)
    )


def detect_episode(
    session: ProctorSession, *, store: ArtifactStore, episode: Episode, thresholds: Thresholds
) -> list[Classified] | None:
    """The classified candidates of a recorded episode (None: no telemetry)."""
    telemetry = _artifact(session, episode, ArtifactKind.telemetry)
    if telemetry is None:
        return None
    manifest_row = _artifact(session, episode, ArtifactKind.manifest)
    manifest = read_json(store, manifest_row.sha256) if manifest_row is not None else None
    assert episode.clock_start_s is not None
    try:
        table = read_parquet(store, telemetry.sha256)
    except (pa.ArrowException, OSError) as exc:
        raise IntegrityError(
            f"episode {episode.uid}: telemetry {telemetry.sha256[:12]}… is unreadable "
            f"({type(exc).__name__}: {exc})"
        ) from None
    return analyze_table(
        table,
        t0=episode.clock_start_s,
        items=episode.items,
        tote_side=episode.tote_side.value,
        thresholds=thresholds,
        manifest=manifest,
    )


def record_annotation(
    session: ProctorSession,
    *,
    episode: Episode,
    classified: list[Classified] | None,
    thresholds: Thresholds,
) -> AnnotationResult:
    """Write candidates and detector placements, and reconcile with the log."""
    check_annotatable(episode)
    placed = int(episode.placed or 0)
    rows: list[tuple[AnnotationCandidate, Classified]] = []
    for item in classified or []:
        c, v = item.candidate, item.verdict
        row = AnnotationCandidate(
            episode_id=episode.id,
            t_s=float(c.t_s),
            kind=c.kind,
            zone=c.zone,
            features=dict(c.features),
            verdict=v.verdict,
            rule=v.rule[:128],
            score=float(v.score) if v.score == v.score else None,
            detector_version=thresholds.version[:32],
        )
        session.add(row)
        rows.append((row, item))
    session.flush()
    successes = [(row, item) for row, item in rows if item.is_success]
    if classified is None:
        agree = placed == 0
        note = "no telemetry recorded" + ("" if agree else ": the placements need a reviewer")
    else:
        agree = len(successes) == placed
        note = (
            f"detector found {len(successes)} placement(s), operator logged {placed}"
            if not agree
            else f"detector and operator agree on {placed} placement(s)"
        )
    status = PlacementStatus.accepted if agree else PlacementStatus.proposed
    for row, _item in successes:
        session.add(
            PlacementEvent(
                episode_id=episode.id,
                t_s=row.t_s,
                source=PlacementSource.detector,
                status=status,
                candidate_id=row.id,
            )
        )
    episode.label_status = LabelStatus.auto if agree else LabelStatus.needs_review
    session.add(
        EpisodeEvent(
            episode_id=episode.id,
            kind="annotation",
            message=note,
            details={
                "detector_version": thresholds.version,
                "candidates": len(rows),
                "successes": len(successes),
                "placed": placed,
                "label_status": episode.label_status.value,
            },
        )
    )
    session.flush()
    return AnnotationResult(
        uid=episode.uid,
        label_status=LabelStatus(episode.label_status),
        candidates=len(rows),
        successes=len(successes),
        placed=placed,
        note=note,
    )


def annotate_episode(
    session: ProctorSession, *, store: ArtifactStore, episode: Episode, thresholds: Thresholds
) -> AnnotationResult:
    """Detect, classify and reconcile one episode (flushed, not committed)."""
    check_annotatable(episode)
    classified = detect_episode(session, store=store, episode=episode, thresholds=thresholds)
    return record_annotation(session, episode=episode, classified=classified, thresholds=thresholds)


def candidates_of(session: ProctorSession, episode: Episode) -> list[AnnotationCandidate]:
    return list(
        session.scalars(
            sa.select(AnnotationCandidate)
            .where(AnnotationCandidate.episode_id == episode.id)
            .order_by(AnnotationCandidate.t_s, AnnotationCandidate.id)
        )
    )


def placements_of(
    session: ProctorSession,
    episode: Episode,
    *,
    source: PlacementSource | None = None,
    statuses: Iterable[PlacementStatus] | None = None,
) -> list[PlacementEvent]:
    q = sa.select(PlacementEvent).where(PlacementEvent.episode_id == episode.id)
    if source is not None:
        q = q.where(PlacementEvent.source == source)
    if statuses is not None:
        q = q.where(PlacementEvent.status.in_(list(statuses)))
    return list(session.scalars(q.order_by(PlacementEvent.t_s, PlacementEvent.id)))
