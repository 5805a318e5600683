"""Reconciliation: detector counts against the operator's, on both databases."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from proctor.annotator.config import Thresholds
from proctor.annotator.reconcile import (
    AlreadyAnnotated,
    NotAnnotatable,
    annotate_episode,
    candidates_of,
    pending_episodes,
    placements_of,
)
from proctor.annotator.review import review_queue
from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import EpisodeEvent
from proctor.core.domain import (
    CandidateVerdict,
    EpisodeState,
    LabelStatus,
    PlacementSource,
    PlacementStatus,
)
from tests.annotator.helpers import SOURCE_XY, Op, store_episode, true_events

TH = Thresholds(version="test-1")
# two placements, a missed grasp and a regrasp over the source bin
OPS = [Op(1.0, 3.0), Op(4.0, 6.0, held=False), Op(7.0, 9.0, release_xy=SOURCE_XY), Op(10, 12)]


def test_agreement_accepts_the_detector_times(
    db_session: ProctorSession, artifact_store: ArtifactStore
) -> None:
    ep = store_episode(db_session, artifact_store, ops=OPS, duration=14, items=3, placed=2)
    result = annotate_episode(db_session, store=artifact_store, episode=ep, thresholds=TH)
    assert (result.label_status, result.candidates, result.successes) == (LabelStatus.auto, 3, 2)
    assert ep.label_status == LabelStatus.auto
    cands = candidates_of(db_session, ep)
    assert [c.verdict for c in cands] == [
        CandidateVerdict.success,
        CandidateVerdict.neutral,
        CandidateVerdict.success,
    ]
    assert {c.detector_version for c in cands} == {"test-1"}
    assert all(c.rule and c.features["hold_s"] > 0 for c in cands)
    placements = placements_of(db_session, ep)
    truth = [t for kind, t in true_events(OPS, 14) if kind == "release"]
    assert [p.t_s for p in placements] == pytest.approx([truth[0], truth[2]])
    assert {(p.source, p.status) for p in placements} == {
        (PlacementSource.detector, PlacementStatus.accepted)
    }
    assert all(p.candidate_id in {c.id for c in cands} for p in placements)
    event = db_session.scalar(
        sa.select(EpisodeEvent).where(
            EpisodeEvent.episode_id == ep.id, EpisodeEvent.kind == "annotation"
        )
    )
    assert event is not None and event.details["label_status"] == "auto"
    assert review_queue(db_session) == []


def test_disagreement_goes_to_the_review_queue(
    db_session: ProctorSession, artifact_store: ArtifactStore
) -> None:
    ep = store_episode(db_session, artifact_store, ops=OPS, duration=14, items=3, placed=3)
    result = annotate_episode(db_session, store=artifact_store, episode=ep, thresholds=TH)
    assert result.label_status == LabelStatus.needs_review
    assert "detector found 2" in result.note and "operator logged 3" in result.note
    placements = placements_of(db_session, ep)
    assert [p.status for p in placements] == [PlacementStatus.proposed] * 2
    [entry] = review_queue(db_session)
    assert (entry.uid, entry.placed, entry.detected, entry.confirmed) == (ep.uid, 3, 2, 0)


def test_only_closed_logged_pending_episodes_are_annotated(
    db_session: ProctorSession, artifact_store: ArtifactStore
) -> None:
    running = store_episode(
        db_session, artifact_store, ops=OPS, duration=14, items=3, placed=0,
        state=EpisodeState.awaiting_log,
    )  # fmt: skip
    with pytest.raises(NotAnnotatable, match="awaiting_log"):
        annotate_episode(db_session, store=artifact_store, episode=running, thresholds=TH)
    closed = store_episode(db_session, artifact_store, ops=OPS, duration=14, items=3, placed=2)
    assert closed in pending_episodes(db_session)
    assert running not in pending_episodes(db_session)
    annotate_episode(db_session, store=artifact_store, episode=closed, thresholds=TH)
    assert closed not in pending_episodes(db_session)
    with pytest.raises(AlreadyAnnotated, match="already annotated"):
        annotate_episode(db_session, store=artifact_store, episode=closed, thresholds=TH)
    assert len(candidates_of(db_session, closed)) == 3  # nothing written twice


def test_without_telemetry_a_placement_needs_a_reviewer(
    db_session: ProctorSession, artifact_store: ArtifactStore
) -> None:
    some = store_episode(
        db_session, artifact_store, ops=[], duration=10, items=2, placed=1, telemetry=False
    )
    none = store_episode(
        db_session, artifact_store, ops=[], duration=10, items=2, placed=0, telemetry=False
    )
    r1 = annotate_episode(db_session, store=artifact_store, episode=some, thresholds=TH)
    r0 = annotate_episode(db_session, store=artifact_store, episode=none, thresholds=TH)
    assert (r1.label_status, r1.candidates) == (LabelStatus.needs_review, 0)
    assert "no telemetry" in r1.note
    assert r0.label_status == LabelStatus.auto  # nothing placed, nothing to time
