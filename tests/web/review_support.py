"""Review fixtures shared by the review tests: a queued episode, a bearer
header, the snapshot worker and the waits on it."""

from __future__ import annotations

import sqlalchemy as sa

from proctor.annotator.config import Thresholds
from proctor.annotator.reconcile import annotate_episode
from proctor.core.db.models import AnalysisSnapshot, Episode, PlacementEvent
from proctor.core.domain import (
    LabelStatus,
    LabelStream,
    PlacementSource,
    PlacementStatus,
)
from proctor.web.snapshots.worker import SnapshotWorker
from tests.annotator.helpers import SOURCE_XY, Op, store_episode
from tests.web.conftest import Web
from tests.web.leaderboard_data import SeededCampaign

OPS = [Op(1.0, 3.0), Op(7.0, 9.0, release_xy=SOURCE_XY), Op(10, 12)]


def queued_episode(web: Web, placed: int = 3) -> str:
    store = web.app.state.web.store
    with web.db() as s:
        ep = store_episode(s, store, ops=OPS, duration=14, items=4, placed=placed)
        annotate_episode(s, store=store, episode=ep, thresholds=Thresholds(version="t"))
        return ep.uid


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


WAIT_S = 300.0


def snapshot_worker(web: Web) -> SnapshotWorker:
    return web.app.state.web.snapshot_worker


def back_to_review(web: Web, seeded: SeededCampaign, *, min_placed: int) -> str:
    """An episode the detector settled (``auto``), sent back to the queue the
    way reconciliation sends a disagreement: detector rows proposed."""
    with web.db() as s:
        episodes = s.scalars(
            sa.select(Episode)
            .where(Episode.uid.in_(seeded.episode_uids), Episode.label_status == LabelStatus.auto)
            .order_by(Episode.id)
        )
        ep = next(e for e in episodes if (e.placed or 0) >= min_placed)
        ep.label_status = LabelStatus.needs_review
        for p in s.scalars(
            sa.select(PlacementEvent).where(
                PlacementEvent.episode_id == ep.id,
                PlacementEvent.source == PlacementSource.detector,
            )
        ):
            p.status = PlacementStatus.proposed
        return ep.uid


def latest_snapshot(web: Web, campaign_id: int, stream: LabelStream) -> tuple[int, str]:
    with web.db() as s:
        row = s.execute(
            sa.select(AnalysisSnapshot.id, AnalysisSnapshot.data_version)
            .where(
                AnalysisSnapshot.campaign_id == campaign_id,
                AnalysisSnapshot.label_stream == stream,
            )
            .order_by(AnalysisSnapshot.id.desc())
            .limit(1)
        ).one()
        return row[0], row[1]
