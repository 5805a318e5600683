"""Measuring the detector on simulated episodes (those with ground truth).

Two views of the same question:

* ``score_database`` — what ``proctor annotate`` stored: the detector's
  placement rows of every annotated episode against its ground truth;
* ``load_corpus`` + ``evaluate`` — the telemetry held in memory and the
  detector re-run for any thresholds (what calibration sweeps).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from proctor.annotator.config import CellLayout, Thresholds
from proctor.annotator.detector import Signals
from proctor.annotator.pipeline import analyze_signals, layout_for
from proctor.annotator.scoring import DetectorScore, EpisodeScore, score_episode, summarize
from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import (
    Artifact,
    Assignment,
    Episode,
    ObjectType,
    PlacementEvent,
    Policy,
)
from proctor.core.domain import (
    ArtifactKind,
    EpisodeState,
    LabelStatus,
    PlacementSource,
    PlacementStatus,
)
from proctor.core.recording.reader import read_json, read_parquet

# a simulated corpus's episodes in plan order: its slots were made in plan
# order (proctor.demo.simulated_episodes), whichever worker ran an episode
# and whenever it was written; an episode without a slot comes in write order
PLAN_ORDER = (Episode.assignment_id, Episode.id)


def _group_names(session: ProctorSession, episodes: list[Episode]) -> dict[int, tuple[str, str]]:
    """episode id → (policy name or run code, object name)."""
    out = {}
    for ep in episodes:
        policy = ""
        if ep.assignment_id is not None:
            a = session.get(Assignment, ep.assignment_id)
            p = session.get(Policy, a.policy_id) if a is not None else None
            policy = p.name if p is not None else ""
        obj = session.get(ObjectType, ep.object_type_id)
        out[ep.id] = (policy or (ep.run_code or ""), obj.name if obj is not None else "")
    return out


def _truth(session: ProctorSession, store: ArtifactStore, ep: Episode) -> list[float] | None:
    art = session.scalar(
        sa.select(Artifact)
        .where(Artifact.episode_id == ep.id, Artifact.kind == ArtifactKind.ground_truth)
        .order_by(Artifact.id.desc())
        .limit(1)
    )
    if art is None:
        return None
    return [float(t) for t in read_json(store, art.sha256)["placements_s"]]


def score_database(
    session: ProctorSession, *, store: ArtifactStore, uids: Iterable[str] | None = None
) -> tuple[DetectorScore, list[EpisodeScore]]:
    """The stored detector placements of annotated simulated episodes vs ground truth."""
    q = sa.select(Episode).where(Episode.label_status != LabelStatus.pending).order_by(*PLAN_ORDER)
    if uids is not None:
        q = q.where(Episode.uid.in_(list(uids)))
    episodes = list(session.scalars(q))
    names = _group_names(session, episodes)
    scores = []
    for ep in episodes:
        truth = _truth(session, store, ep)
        if truth is None:
            continue
        detected = [
            float(t)
            for t in session.scalars(
                sa.select(PlacementEvent.t_s)
                .where(
                    PlacementEvent.episode_id == ep.id,
                    PlacementEvent.source == PlacementSource.detector,
                    PlacementEvent.status.in_([PlacementStatus.accepted, PlacementStatus.proposed]),
                )
                .order_by(PlacementEvent.t_s)
            )
        ]
        group, obj = names[ep.id]
        scores.append(
            score_episode(
                uid=ep.uid,
                true_s=truth,
                detected_s=detected,
                placed=int(ep.placed or 0),
                group=group,
                object=obj,
            )
        )
    return summarize(scores), scores


@dataclass(frozen=True)
class CorpusEpisode:
    uid: str
    group: str
    object: str
    items: int
    placed: int
    tote_side: str
    manifest: dict
    signals: Signals
    true_s: tuple[float, ...]

    def layout(self, thresholds: Thresholds) -> CellLayout:
        return layout_for(thresholds, tote_side=self.tote_side, manifest=self.manifest)


def load_corpus(
    session: ProctorSession, *, store: ArtifactStore, uids: Iterable[str] | None = None
) -> list[CorpusEpisode]:
    """Closed, logged simulated episodes with their telemetry in memory."""
    q = (
        sa.select(Episode)
        .where(Episode.state == EpisodeState.closed, Episode.placed.is_not(None))
        .order_by(*PLAN_ORDER)
    )
    if uids is not None:
        q = q.where(Episode.uid.in_(list(uids)))
    episodes = list(session.scalars(q))
    names = _group_names(session, episodes)
    out = []
    for ep in episodes:
        truth = _truth(session, store, ep)
        arts = {
            a.kind: a
            for a in session.scalars(sa.select(Artifact).where(Artifact.episode_id == ep.id))
        }
        tel = arts.get(ArtifactKind.telemetry)
        if truth is None or tel is None or ep.clock_start_s is None:
            continue
        manifest = (
            read_json(store, arts[ArtifactKind.manifest].sha256)
            if ArtifactKind.manifest in arts
            else {}
        )
        group, obj = names[ep.id]
        out.append(
            CorpusEpisode(
                uid=ep.uid,
                group=group,
                object=obj,
                items=ep.items,
                placed=int(ep.placed or 0),
                tote_side=ep.tote_side.value,
                manifest=manifest,
                signals=Signals.from_table(read_parquet(store, tel.sha256), t0=ep.clock_start_s),
                true_s=tuple(truth),
            )
        )
    return out


def evaluate(
    corpus: Iterable[CorpusEpisode], thresholds: Thresholds
) -> tuple[DetectorScore, list[EpisodeScore]]:
    scores = []
    for ep in corpus:
        classified = analyze_signals(
            ep.signals, items=ep.items, layout=ep.layout(thresholds), thresholds=thresholds
        )
        detected = [c.candidate.t_s for c in classified if c.is_success]
        scores.append(
            score_episode(
                uid=ep.uid,
                true_s=ep.true_s,
                detected_s=detected,
                placed=ep.placed,
                group=ep.group,
                object=ep.object,
            )
        )
    return summarize(scores), scores
