"""After the rollouts: annotate, review, close, release, score."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession, session_scope
from proctor.core.db.models import Episode
from proctor.core.domain import LabelStatus
from proctor.core.errors import ProctorError

Tick = Callable[[str], None]


def annotate_campaign(
    sessions: sessionmaker[ProctorSession],
    store: ArtifactStore,
    *,
    campaign_id: int,
    tick: Tick,
) -> Counter[str]:
    """Run the release detector on every closed, logged episode of the
    campaign and reconcile it with the (stand-in) operator's count."""
    from proctor.annotator.config import load_thresholds
    from proctor.annotator.reconcile import annotate_episode, find_episode, pending_episodes

    thresholds = load_thresholds(None)
    with session_scope(sessions) as s:
        uids = [e.uid for e in pending_episodes(s) if e.campaign_id == campaign_id]
    counts: Counter[str] = Counter()
    for uid in uids:
        with session_scope(sessions) as s:
            result = annotate_episode(
                s, store=store, episode=find_episode(s, uid), thresholds=thresholds
            )
        counts[result.label_status.value] += 1
        tick(f"{uid}: {result.label_status.value}")
    return counts


def review_campaign(
    sessions: sessionmaker[ProctorSession],
    store: ArtifactStore,
    *,
    campaign_id: int,
    tick: Tick,
) -> Counter[str]:
    """The labelled automatic reviewer (``proctor.annotator.autoreview``) works the
    queue: flagged counts go to the labelled automatic admin first."""
    from proctor.annotator.autoreview import (
        resolve_flag_with_ground_truth,
        review_with_ground_truth,
    )

    counts: Counter[str] = Counter()
    for _ in range(3):  # a flag resolved sends the episode back to review once
        with session_scope(sessions) as s:
            queue = list(
                s.execute(
                    sa.select(Episode.uid, Episode.label_status).where(
                        Episode.campaign_id == campaign_id,
                        Episode.label_status.in_([LabelStatus.needs_review, LabelStatus.flagged]),
                    )
                )
            )
        if not queue:
            break
        for uid, status in queue:
            with session_scope(sessions) as s:
                if status == LabelStatus.flagged:
                    state = resolve_flag_with_ground_truth(s, store=store, uid=uid)
                else:
                    state = review_with_ground_truth(s, store=store, uid=uid)
            counts[state.label_status.value] += 1
            tick(f"{uid}: {state.label_status.value}")
    return counts


def label_summary(sessions: sessionmaker[ProctorSession], *, campaign_id: int) -> Counter[str]:
    with session_scope(sessions) as s:
        rows = s.execute(
            sa.select(Episode.label_status, sa.func.count())
            .where(Episode.campaign_id == campaign_id)
            .group_by(Episode.label_status)
        ).all()
    return Counter({status.value: n for status, n in rows})


def close_and_release(sessions: sessionmaker[ProctorSession], *, campaign_id: int) -> str:
    """Close (the seed is revealed), verify the allocation against the log,
    release (identities public). Returns the revealed seed."""
    from proctor.scheduler.service import Actor, close_campaign, release_campaign, reveal_allocation

    actor = Actor(label="proctor demo")
    with session_scope(sessions) as s:
        seed = close_campaign(s, campaign=campaign_id, actor=actor)
    with session_scope(sessions) as s:
        revelation = reveal_allocation(s, campaign=campaign_id)
        if not revelation.verified:
            raise ProctorError(
                "the revealed seed does not re-derive the logged allocation: "
                "this is a bug, not a demo artefact"
            )
    with session_scope(sessions) as s:
        release_campaign(s, campaign=campaign_id, actor=actor)
    return seed


def score_campaign(sessions: sessionmaker[ProctorSession], *, campaign_id: int) -> list[object]:
    """A snapshot per label stream, as the web pages read them."""
    from proctor.analysis.store import recompute

    with session_scope(sessions) as s:
        return list(recompute(s, campaign_id=campaign_id, force=True))
