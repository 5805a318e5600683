"""The review UI and its JSON API.

Pages: ``/review`` (the queue: episodes whose detector count disagrees with
the operator's, oldest first; admins also see flagged counts) and
``/review/{uid}`` (one episode: both videos with frame-accurate scrubbing,
gripper and height traces with the candidates marked, and the decisions).

API under ``/api/review``: the queue, one episode's review state, and one
POST per decision — confirm, move, reject, add, flag (reviewers) and
resolve (admins) — and the failure-mode tags: tag a moment, retract a tag
(``proctor.annotator.tags``; on any closed episode, queued or not). Each
decision calls the same service function
(``proctor.annotator.review``) the demo's automatic reviewer calls, inside the
request's transaction, and answers with the episode's new review state.
Video bytes, frame tables and telemetry come from the recordings API
(``proctor.web.artifacts``), which lets reviewers (staff) read unreleased episodes.

A decision that finishes an episode (it becomes ``reviewed``) and every
resolved flag change what the analysis scores: the campaign's leaderboard
snapshots are recomputed in the background once the request commits
(``proctor.web.snapshots.worker.recompute_after_commit``; a request that rolls back
queues nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Path, Request
from fastapi.responses import HTMLResponse

from proctor.annotator import review as svc
from proctor.annotator import tags as tags_svc
from proctor.annotator.taxonomy import load_taxonomy
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Episode
from proctor.core.domain import ArtifactKind, LabelStatus, Outcome, Role
from proctor.web.artifacts.service import episode_artifacts
from proctor.web.auth.identity import Principal
from proctor.web.deps import NowDep, SessionDep, require_role
from proctor.web.errors import error_responses
from proctor.web.review.schemas import (
    AddIn,
    CameraMedia,
    ConfirmIn,
    FailureModeOut,
    FlagIn,
    MoveIn,
    QueueEntryOut,
    RejectIn,
    ResolveIn,
    RetractIn,
    ReviewOut,
    TagIn,
    TagOut,
)
from proctor.web.snapshots.worker import recompute_after_commit
from proctor.web.templating import render

api_router = APIRouter(
    prefix="/review", tags=["review"], responses=error_responses(401, 403, 404, 409, 422)
)
page_router = APIRouter()

ReviewerDep = Annotated[Principal, require_role(Role.reviewer, Role.admin)]
AdminDep = Annotated[Principal, require_role(Role.admin)]
EpisodeUid = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,32}$", description="the episode's uid")]


def reviewer_of(who: Principal) -> svc.Reviewer:
    return svc.Reviewer(user_id=who.id, admin=who.is_admin)


def _media(session: SessionDep, uid: str) -> tuple[list[CameraMedia], str | None]:
    from proctor.annotator.reconcile import find_episode

    episode = find_episode(session, uid)
    cameras = []
    seen: set[str] = set()
    for art in reversed(episode_artifacts(session, episode, ArtifactKind.video)):
        if art.camera is None or art.camera in seen:
            continue
        seen.add(art.camera)
        cameras.append(
            CameraMedia(
                camera=art.camera,
                video_url=f"/api/artifacts/{art.sha256}",
                frames_url=f"/api/episodes/{uid}/frames/{art.camera}",
                frames=art.frame_count,
            )
        )
    # the exterior view first, as on the station's console
    cameras.sort(key=lambda c: (c.camera != "exterior", c.camera))
    has_telemetry = bool(episode_artifacts(session, episode, ArtifactKind.telemetry))
    telemetry = (
        f"/api/episodes/{uid}/telemetry?columns=gripper_target,gripper_position,"
        "gripper_object,ee_z&max_points=20000"
        if has_telemetry
        else None
    )
    return cameras, telemetry


def after_decision(
    session: ProctorSession, state: svc.ReviewState, *, resolved: bool = False
) -> bool:
    """Queue the episode's campaign for a background recomputation of its
    snapshots when the decision changed what the analysis scores: the episode
    became ``reviewed``, or an admin resolved a flag (``resolved``). Queued
    only when the request's transaction commits. True if it was asked for."""
    if not resolved and state.label_status != LabelStatus.reviewed:
        return False
    campaign_id = session.scalar(sa.select(Episode.campaign_id).where(Episode.uid == state.uid))
    recompute_after_commit(session, campaign_id=campaign_id)
    return campaign_id is not None


def _out(session: SessionDep, state: svc.ReviewState) -> ReviewOut:
    cameras, telemetry = _media(session, state.uid)
    out = ReviewOut.of(state, cameras, telemetry)
    taxonomy = load_taxonomy()
    out.tags = [TagOut.of(t, taxonomy) for t in tags_svc.episode_tags(session, uid=state.uid)]
    out.failure_modes = [FailureModeOut(**vars(m)) for m in taxonomy.modes]
    return out


def _decided(
    session: ProctorSession, decide: Callable[[], svc.ReviewState], *, resolved: bool = False
) -> ReviewOut:
    """Run one review action (its errors are answered by ``proctor.web.errors``), queue the
    recomputation it calls for, and answer with the episode's new state."""
    state = decide()
    after_decision(session, state, resolved=resolved)
    return _out(session, state)


@api_router.get("/queue", summary="Episodes waiting for review, oldest first")
def queue(session: SessionDep, who: ReviewerDep) -> list[QueueEntryOut]:
    return [QueueEntryOut.of(e) for e in svc.review_queue(session, admin=who.is_admin)]


@api_router.get("/episodes/{uid}", summary="One episode's candidates, placements and history")
def episode_review(uid: EpisodeUid, session: SessionDep, who: ReviewerDep) -> ReviewOut:
    return _out(session, svc.review_state(session, uid=uid))


@api_router.post("/episodes/{uid}/confirm", summary="Confirm a candidate as a placement")
def confirm(
    uid: EpisodeUid, body: ConfirmIn, session: SessionDep, who: ReviewerDep, now: NowDep
) -> ReviewOut:
    return _decided(
        session,
        lambda: svc.confirm(
            session,
            uid=uid,
            candidate_id=body.candidate_id,
            reviewer=reviewer_of(who),
            note=body.note,
            now=now,
        ),
    )


@api_router.post("/episodes/{uid}/move", summary="Move a placement or a candidate to t_s")
def move(
    uid: EpisodeUid, body: MoveIn, session: SessionDep, who: ReviewerDep, now: NowDep
) -> ReviewOut:
    return _decided(
        session,
        lambda: svc.move(
            session,
            uid=uid,
            t_s=body.t_s,
            placement_id=body.placement_id,
            candidate_id=body.candidate_id,
            reviewer=reviewer_of(who),
            note=body.note,
            now=now,
        ),
    )


@api_router.post("/episodes/{uid}/reject", summary="Reject a placement or a candidate")
def reject(
    uid: EpisodeUid, body: RejectIn, session: SessionDep, who: ReviewerDep, now: NowDep
) -> ReviewOut:
    return _decided(
        session,
        lambda: svc.reject(
            session,
            uid=uid,
            placement_id=body.placement_id,
            candidate_id=body.candidate_id,
            reviewer=reviewer_of(who),
            note=body.note,
            now=now,
        ),
    )


@api_router.post("/episodes/{uid}/add", summary="Add a placement the detector missed")
def add(
    uid: EpisodeUid, body: AddIn, session: SessionDep, who: ReviewerDep, now: NowDep
) -> ReviewOut:
    return _decided(
        session,
        lambda: svc.add(
            session, uid=uid, t_s=body.t_s, reviewer=reviewer_of(who), note=body.note, now=now
        ),
    )


@api_router.post("/episodes/{uid}/flag", summary="Flag the operator's count as wrong (to an admin)")
def flag(
    uid: EpisodeUid, body: FlagIn, session: SessionDep, who: ReviewerDep, now: NowDep
) -> ReviewOut:
    state = svc.flag_count(session, uid=uid, reviewer=reviewer_of(who), note=body.note, now=now)
    return _out(session, state)


@api_router.post(
    "/episodes/{uid}/resolve",
    summary="Resolve a flagged count (admin): let it stand or correct the log",
)
def resolve(
    uid: EpisodeUid, body: ResolveIn, session: SessionDep, who: AdminDep, now: NowDep
) -> ReviewOut:
    correction = None
    if body.placed is not None:
        assert body.lost is not None and body.dropped is not None
        try:
            outcome = Outcome(body.outcome) if body.outcome is not None else None
        except ValueError:
            known = ", ".join(o.value for o in Outcome)
            raise HTTPException(422, f"outcome: must be one of {known}") from None
        correction = svc.CountCorrection(body.placed, body.lost, body.dropped, outcome)
    return _decided(
        session,
        lambda: svc.resolve_flag(
            session,
            uid=uid,
            reviewer=reviewer_of(who),
            note=body.note,
            correction=correction,
            now=now,
        ),
        resolved=True,
    )


@api_router.post("/episodes/{uid}/tags", summary="Tag a moment with a behavioural failure mode")
def tag(
    uid: EpisodeUid, body: TagIn, session: SessionDep, who: ReviewerDep, now: NowDep
) -> ReviewOut:
    tags_svc.tag_failure(
        session,
        uid=uid,
        mode=body.mode,
        t_s=body.t_s,
        reviewer=reviewer_of(who),
        taxonomy=load_taxonomy(),
        note=body.note,
        now=now,
    )
    return _out(session, svc.review_state(session, uid=uid))


@api_router.post(
    "/episodes/{uid}/tags/{tag_id}/retract",
    summary="Withdraw a failure-mode tag (a new record; the tag's stays)",
)
def retract(
    uid: EpisodeUid,
    tag_id: Annotated[int, Path(ge=1, le=2**31 - 1)],
    body: RetractIn,
    session: SessionDep,
    who: ReviewerDep,
    now: NowDep,
) -> ReviewOut:
    tags_svc.retract_tag(
        session, uid=uid, tag_id=tag_id, reviewer=reviewer_of(who), note=body.note, now=now
    )
    return _out(session, svc.review_state(session, uid=uid))


# -- pages ---------------------------------------------------------------------------


@page_router.get("/review", response_class=HTMLResponse)
def queue_page(request: Request, session: SessionDep, who: ReviewerDep) -> HTMLResponse:
    entries = svc.review_queue(session, admin=who.is_admin)
    return render(request, "review/queue.html", {"entries": entries, "is_admin": who.is_admin})


@page_router.get("/review/{uid}", response_class=HTMLResponse)
def episode_page(
    request: Request, uid: EpisodeUid, session: SessionDep, who: ReviewerDep
) -> HTMLResponse:
    state = svc.review_state(session, uid=uid)
    return render(
        request,
        "review/episode.html",
        {"state": state, "is_admin": who.is_admin, "outcomes": [o.value for o in Outcome]},
    )
