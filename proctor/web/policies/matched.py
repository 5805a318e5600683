"""Two policies side by side on matched episodes: the compare view's data.

Episodes are matched within a campaign on what the scene was — the same
object and the same configuration (tote side, external camera side) — and,
within such a stratum, in the order they were recorded: A's first with B's
first, and so on; the longer side's extra episodes stay unmatched (counted,
not shown). Each side's exterior video (the first camera otherwise) is
linked, so the page can play both in sync; the KM CDFs per object come from
the snapshot, so the overlaid curves are the leaderboard's own."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict
from typing import Any

import sqlalchemy as sa
from fastapi import HTTPException, status
from pydantic import BaseModel, Field

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Artifact, Assignment, Episode, ObjectType
from proctor.core.domain import ArtifactKind, EpisodeState
from proctor.web.leaderboard.board import Board
from proctor.web.leaderboard.format import at_resampling_floor


class SideOut(BaseModel):
    uid: str
    placed: int | None
    items: int
    duration_s: float | None
    outcome: str | None
    video_url: str | None = Field(description="its exterior camera's video (null: none)")
    frames_url: str | None
    explorer: str


class MatchOut(BaseModel):
    object: str
    configuration: str = Field(description="tote side / external camera side")
    a: SideOut
    b: SideOut


class StratumOut(BaseModel):
    object: str
    configuration: str
    a_episodes: int
    b_episodes: int
    matched: int


class CompareOut(BaseModel):
    campaign_id: int
    a: str
    b: str
    tau_s: float
    verdict: dict[str, Any] | None = Field(description="the pair's verdict from the snapshot")
    strata: list[StratumOut]
    matches: list[MatchOut]
    curves: list[dict[str, Any]] = Field(description="per object: both KM CDFs (t, cdf, lo, hi)")
    links: dict[str, str]


def _videos(session: ProctorSession, ids: list[int]) -> dict[int, Artifact]:
    best: dict[int, Artifact] = {}
    rows = session.scalars(
        sa.select(Artifact)
        .where(Artifact.episode_id.in_(ids), Artifact.kind == ArtifactKind.video)
        .order_by(Artifact.id)
    )
    for art in rows:
        if art.episode_id is None:
            continue
        held = best.get(art.episode_id)
        # the exterior view shows the whole scene; otherwise whichever came first
        if held is None or (art.camera == "exterior" and held.camera != "exterior"):
            best[art.episode_id] = art
    return best


def _episodes(session: ProctorSession, board: Board, label: str) -> list[tuple[Episode, str]]:
    pid = board.policy_ids.get(label)
    if pid is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"policy {label!r} not in this leaderboard")
    excluded = {e.episode_id for e in board.snapshot.excluded}
    rows = session.execute(
        sa.select(Episode, ObjectType.name)
        .join(Assignment, Episode.assignment_id == Assignment.id)
        .join(ObjectType, Episode.object_type_id == ObjectType.id)
        .where(
            Episode.campaign_id == board.campaign.id,
            Assignment.policy_id == pid,
            Episode.state == EpisodeState.closed,
        )
        .order_by(Episode.started_at, Episode.id)
    ).all()
    return [(ep, obj) for ep, obj in rows if ep.uid not in excluded]


def _side(ep: Episode, video: Artifact | None) -> SideOut:
    return SideOut(
        uid=ep.uid,
        placed=ep.placed,
        items=ep.items,
        duration_s=ep.duration_s,
        outcome=ep.outcome.value if ep.outcome else None,
        video_url=f"/api/artifacts/{video.sha256}" if video else None,
        frames_url=f"/api/episodes/{ep.uid}/frames/{video.camera}" if video else None,
        explorer=f"/episodes/{ep.uid}",
    )


def _strata(
    rows: list[tuple[Episode, str]],
) -> dict[tuple[str, str], list[Episode]]:
    out: dict[tuple[str, str], list[Episode]] = defaultdict(list)
    for ep, obj in rows:
        out[(obj, f"tote {ep.tote_side.value} / camera {ep.camera_side.value}")].append(ep)
    return out


def compare_view(session: ProctorSession, board: Board, a: str, b: str) -> CompareOut:
    if a == b:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "b: pick a policy other than a")
    sa_, sb = _strata(_episodes(session, board, a)), _strata(_episodes(session, board, b))
    strata: list[StratumOut] = []
    pairs: list[tuple[tuple[str, str], Episode, Episode]] = []
    for key in sorted(set(sa_) | set(sb)):
        ea, eb = sa_.get(key, []), sb.get(key, [])
        strata.append(StratumOut(object=key[0], configuration=key[1], a_episodes=len(ea),
                                 b_episodes=len(eb), matched=min(len(ea), len(eb))))  # fmt: skip
        pairs.extend((key, x, y) for x, y in zip(ea, eb, strict=False))
    videos = _videos(session, [x.id for _, x, _ in pairs] + [y.id for _, _, y in pairs])
    matches = [
        MatchOut(
            object=key[0],
            configuration=key[1],
            a=_side(x, videos.get(x.id)),
            b=_side(y, videos.get(y.id)),
        )
        for key, x, y in pairs
    ]
    pa, pb = board.policy(a), board.policy(b)
    kb = {o.object: asdict(o.km) for o in pb.per_object}
    curves = [
        {"object": o.object, "a": asdict(o.km), "b": kb[o.object]}
        for o in pa.per_object
        if o.object in kb
    ]
    verdict = next(
        (
            {
                "a": q.a,
                "b": q.b,
                "verdict": q.verdict,
                "winner": q.winner,
                "significant": q.significant,
                # the numbers behind it, so the page can say why in one line
                "ks_p_bonferroni": q.macro_ks.p_bonferroni,
                "ks_p_at_floor": at_resampling_floor(q.macro_ks.p, q.macro_ks.resamples),
                "rmst_diff": [q.rmst_diff.estimate, q.rmst_diff.lo, q.rmst_diff.hi],
                "rmst_diff_bonferroni": None
                if q.rmst_diff_bonferroni is None
                else [q.rmst_diff_bonferroni.lo, q.rmst_diff_bonferroni.hi],
                "auc": q.auc.estimate,
            }
            for q in board.snapshot.pairs
            if {q.a, q.b} == {a, b}
        ),
        None,
    )
    return CompareOut(
        campaign_id=board.campaign.id,
        a=a,
        b=b,
        tau_s=board.snapshot.protocol.tau,
        verdict=verdict,
        strata=strata,
        matches=matches,
        curves=curves,
        links={
            "leaderboard": board.board_url(),
            "a": board.policy_url(a),
            "b": board.policy_url(b),
        },
    )
