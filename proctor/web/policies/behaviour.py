"""The policy page's behavioural breakdown: the live failure-mode tags on
the policy's counted episodes, per object and mode
(``proctor.analysis.behaviour``), how many of them a person reviewed, and the
tagged moments with links into the explorer. Read from the review log at
view time, so the cache keys carry ``tags_version`` (a tag changes the page,
not the snapshot).

An episode counts as reviewed when a person (a user, not software) left any
record in its review log: a placement decision, a tag or a retraction. The
telemetry proposer's tags count in the shares but review nothing: it writes
only what it finds, so where it found nothing the log cannot say it ran."""

from __future__ import annotations

import numpy as np
import sqlalchemy as sa
from pydantic import BaseModel, Field

from proctor.analysis.behaviour import behaviour_breakdown
from proctor.annotator.tags import tags_of
from proctor.annotator.taxonomy import Taxonomy, load_taxonomy
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Assignment, Episode, ObjectType, ReviewAction
from proctor.core.domain import EpisodeState, ReviewActionKind
from proctor.web.leaderboard.board import Board
from proctor.web.leaderboard.schemas import IntervalOut

_TAG_KINDS = (ReviewActionKind.tag_failure, ReviewActionKind.retract_tag)


class BehaviourOut(BaseModel):
    object: str
    mode: str
    label: str
    episodes: int = Field(description="the policy's counted episodes on this object")
    episodes_with: int = Field(description="of them, with at least one live tag of the mode")
    tags: int = Field(description="live tags of the mode on those episodes")
    share: IntervalOut | None = Field(description="episodes_with / episodes, Wilson 95% interval")
    reviewed: int = Field(
        description="of the counted episodes on this object, those a person reviewed (any "
        "review record); the share is a tagged rate, a lower bound where review is selective"
    )


class ReviewedOut(BaseModel):
    """How many of the policy's counted episodes a person reviewed."""

    episodes: int
    reviewed: int


class TaggedMoment(BaseModel):
    uid: str
    object: str
    mode: str
    label: str
    t_s: float
    automatic: bool
    explorer: str


def tags_version(session: ProctorSession, campaign_id: int) -> tuple[int, int]:
    """(count, last id) of the campaign's tag records: changes with every tag."""
    count, last = session.execute(
        sa.select(sa.func.count(), sa.func.max(ReviewAction.id))
        .join(Episode, Episode.id == ReviewAction.episode_id)
        .where(Episode.campaign_id == campaign_id, ReviewAction.action.in_(_TAG_KINDS))
    ).one()
    return int(count), int(last or 0)


def _counted(session: ProctorSession, board: Board, label: str) -> list[tuple[int, str, str]]:
    pid = board.policy_ids.get(label)
    if pid is None:
        return []
    excluded = {e.episode_id for e in board.snapshot.excluded}
    rows = session.execute(
        sa.select(Episode.id, Episode.uid, ObjectType.name, Episode.created_at)
        .join(Assignment, Episode.assignment_id == Assignment.id)
        .join(ObjectType, Episode.object_type_id == ObjectType.id)
        .where(
            Episode.campaign_id == board.campaign.id,
            Assignment.policy_id == pid,
            Episode.state == EpisodeState.closed,
        )
        .order_by(Episode.id)
    ).all()
    # the episodes the snapshot scored: not excluded, not recorded after it
    return [
        (eid, uid, obj)
        for eid, uid, obj, created in rows
        if uid not in excluded and not (created and created > board.meta.created_at)
    ]


def _reviewed_by_a_person(session: ProctorSession, episode_ids: list[int]) -> set[int]:
    if not episode_ids:
        return set()
    return set(
        session.scalars(
            sa.select(ReviewAction.episode_id)
            .where(
                ReviewAction.episode_id.in_(episode_ids),
                ReviewAction.reviewer_id.is_not(None),
            )
            .distinct()
        )
    )


def policy_behaviour(
    session: ProctorSession, board: Board, label: str, taxonomy: Taxonomy | None = None
) -> tuple[list[BehaviourOut], list[TaggedMoment], ReviewedOut]:
    taxonomy = taxonomy or load_taxonomy()
    episodes = _counted(session, board, label)
    objects = [o.object for o in board.policy(label).per_object]
    for _, _, obj in episodes:
        if obj not in objects:
            objects.append(obj)
    index = {eid: i for i, (eid, _, _) in enumerate(episodes)}
    tags = tags_of(session, list(index))
    modes = list(taxonomy.keys) + sorted({t.mode for t in tags} - set(taxonomy.keys))
    reviewed = _reviewed_by_a_person(session, list(index))
    cells = behaviour_breakdown(
        objects,
        modes,
        np.array([objects.index(obj) for _, _, obj in episodes], dtype=np.int64),
        np.array([index[t.episode_id] for t in tags], dtype=np.int64),
        np.array([modes.index(t.mode) for t in tags], dtype=np.int64),
        np.array([eid in reviewed for eid, _, _ in episodes], dtype=bool),
    )
    breakdown = [
        BehaviourOut(
            object=c.object,
            mode=c.mode,
            label=taxonomy.label(c.mode),
            episodes=c.episodes,
            episodes_with=c.episodes_with,
            tags=c.tags,
            share=IntervalOut(estimate=c.share.estimate, lo=c.share.lo, hi=c.share.hi)
            if c.share.estimate is not None
            else None,
            reviewed=c.reviewed,
        )
        for c in cells
    ]
    obj_of = {eid: obj for eid, _, obj in episodes}
    moments = [
        TaggedMoment(
            uid=t.uid,
            object=obj_of[t.episode_id],
            mode=t.mode,
            label=taxonomy.label(t.mode),
            t_s=t.t_s,
            automatic=t.automatic,
            explorer=f"/episodes/{t.uid}?t={t.t_s:.3f}",
        )
        for t in sorted(tags, key=lambda t: (obj_of[t.episode_id], t.uid, t.t_s))
    ]
    return breakdown, moments, ReviewedOut(episodes=len(episodes), reviewed=len(reviewed))
