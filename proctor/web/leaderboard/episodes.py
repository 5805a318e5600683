"""The episodes behind a leaderboard number: a campaign's episodes, by
policy label and object, with what the analysis made of each (counted, or
excluded and why)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from fastapi import HTTPException, status
from pydantic import BaseModel, Field

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Assignment, Episode, ObjectType
from proctor.web.leaderboard.board import Board

MAX_PAGE = 500


class EpisodeRow(BaseModel):
    uid: str
    policy: str = Field(
        description="the policy's label: its name, or its arm label before release and when "
        "its submitter has not opted in to the public board"
    )
    identity_withheld: bool = Field(description="the label stands in for a withheld name")
    object: str
    run_code: str | None
    configuration: str = Field(description="tote side / external camera side")
    state: str
    outcome: str | None
    items: int
    placed: int | None
    dropped: int | None
    lost: int | None
    envelope_interventions: int | None = Field(
        description="commands the station's safety envelope clamped or stopped; null: not counted"
    )
    duration_s: float | None
    label_status: str
    started_at: datetime | None
    counted: bool = Field(description="whether this snapshot's analysis scored it")
    excluded_reason: str | None
    explorer: str


class EpisodeListOut(BaseModel):
    campaign_id: int
    policy: str | None
    note: str | None = Field(description="'identity withheld by the submitter' where it is")
    object: str | None
    total: int
    offset: int
    limit: int
    episodes: list[EpisodeRow]


def episode_list(
    session: ProctorSession,
    board: Board,
    *,
    policy: str | None,
    obj: str | None,
    offset: int,
    limit: int,
) -> EpisodeListOut:
    id_to_label = {pid: label for label, pid in board.policy_ids.items()}
    q = (
        sa.select(Episode, Assignment.policy_id, ObjectType.name)
        .join(Assignment, Episode.assignment_id == Assignment.id)
        .join(ObjectType, Episode.object_type_id == ObjectType.id)
        .where(Episode.campaign_id == board.campaign.id)
    )
    if policy is not None:
        pid = board.policy_ids.get(policy)
        if pid is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "policy not found in this leaderboard")
        q = q.where(Assignment.policy_id == pid)
    if obj is not None:
        q = q.where(ObjectType.name == obj)
    total = session.scalar(sa.select(sa.func.count()).select_from(q.subquery())) or 0
    rows = session.execute(
        q.order_by(Episode.started_at, Episode.id).offset(offset).limit(limit)
    ).all()
    excluded = {e.episode_id: e.reason for e in board.snapshot.excluded}
    out = []
    for ep, pid, obj_name in rows:
        reason = excluded.get(ep.uid)
        if reason is None and ep.created_at and ep.created_at > board.meta.created_at:
            reason = "recorded after this snapshot was computed"
        out.append(
            EpisodeRow(
                uid=ep.uid,
                policy=id_to_label.get(pid, "?"),
                identity_withheld=board.is_withheld(id_to_label.get(pid, "?")),
                object=obj_name,
                run_code=ep.run_code,
                configuration=f"tote {ep.tote_side.value} / camera {ep.camera_side.value}",
                state=ep.state.value,
                outcome=ep.outcome.value if ep.outcome else None,
                items=ep.items,
                placed=ep.placed,
                dropped=ep.dropped,
                lost=ep.lost,
                envelope_interventions=ep.envelope_interventions,
                duration_s=ep.duration_s,
                label_status=ep.label_status.value,
                started_at=ep.started_at,
                counted=reason is None,
                excluded_reason=reason,
                explorer=f"/episodes/{ep.uid}",
            )
        )
    return EpisodeListOut(
        campaign_id=board.campaign.id,
        policy=policy,
        note=board.note(policy) if policy is not None else None,
        object=obj,
        total=total,
        offset=offset,
        limit=limit,
        episodes=out,
    )
