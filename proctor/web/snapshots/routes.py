"""Admin control of leaderboard snapshots: recompute now or in the
background, list what is stored, and see the background worker.

``POST /api/snapshots`` with ``{"campaign_id": 3}`` queues a recomputation
(202); with ``"wait": true`` it computes in the request and returns what
each label stream did (200). The leaderboard page offers admins the same
as a button.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response, status
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, ConfigDict, Field

from proctor.analysis import store as analysis_store
from proctor.core.db.models import Campaign
from proctor.core.domain import LabelStream, Role
from proctor.core.errors import FieldError
from proctor.web.auth.identity import Principal
from proctor.web.deps import AppStateDep, DbId, SessionDep, SessionStateDep, require_role
from proctor.web.errors import error_responses
from proctor.web.snapshots import service
from proctor.web.snapshots.worker import SnapshotWorker

api_router = APIRouter(tags=["snapshots"], responses=error_responses(401, 403, 422))
page_router = APIRouter()
AdminUser = Annotated[Principal, require_role(Role.admin)]


class RecomputeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    campaign_id: int = Field(ge=1, le=2**31 - 1)
    streams: list[LabelStream] | None = Field(
        default=None, description="label streams to score (default: all three)"
    )
    force: bool = Field(default=False, description="store new snapshots even if nothing changed")
    wait: bool = Field(default=False, description="compute in this request instead of queueing")


class OutcomeOut(BaseModel):
    stream: LabelStream
    status: str = Field(description="created | unchanged | failed")
    snapshot_id: int | None
    data_version: str | None
    message: str


class RunOut(BaseModel):
    campaign_id: int
    started: float
    seconds: float
    outcomes: list[OutcomeOut]
    error: str | None


class WorkerOut(BaseModel):
    pending: list[int]
    running: int | None
    recent: list[RunOut]


class RecomputeOut(BaseModel):
    queued: bool
    outcomes: list[OutcomeOut] = Field(default_factory=list)
    worker: WorkerOut | None = None


class SnapshotOut(BaseModel):
    id: int
    campaign_id: int | None
    label_stream: LabelStream
    code_version: str
    data_version: str
    created_at: datetime


def _outcome(o: analysis_store.StreamOutcome) -> OutcomeOut:
    return OutcomeOut(
        stream=o.stream,
        status=o.status,
        snapshot_id=o.snapshot_id,
        data_version=o.data_version,
        message=o.message,
    )


def _worker(w: SnapshotWorker) -> WorkerOut:
    st = w.status()
    return WorkerOut(
        pending=st.pending,
        running=st.running,
        recent=[
            RunOut(
                campaign_id=r.campaign_id,
                started=r.started,
                seconds=r.seconds,
                outcomes=[_outcome(o) for o in r.outcomes],
                error=r.error,
            )
            for r in reversed(st.recent)
        ],
    )


@api_router.post(
    "/snapshots",
    summary="Recompute a campaign's leaderboard snapshots (queued, or now with wait=true)",
    responses={202: {"model": RecomputeOut, "description": "queued"}},
)
def recompute(
    body: RecomputeIn,
    session: SessionDep,
    app: AppStateDep,
    who: AdminUser,
    response: Response,
) -> RecomputeOut:
    if body.wait:
        outcomes = analysis_store.recompute(
            session,
            campaign_id=body.campaign_id,
            streams=tuple(body.streams or service.STREAMS),
            created_by_id=who.id,
            force=body.force,
        )
        return RecomputeOut(queued=False, outcomes=[_outcome(o) for o in outcomes])
    if session.get(Campaign, body.campaign_id) is None:
        raise FieldError("campaign_id", f"no campaign {body.campaign_id}")
    worker = app.snapshot_worker
    worker.request(body.campaign_id)
    response.status_code = status.HTTP_202_ACCEPTED
    return RecomputeOut(queued=True, worker=_worker(worker))


@api_router.get("/snapshots", summary="Stored snapshots (newest first)")
def list_snapshots(
    session: SessionDep,
    who: AdminUser,
    campaign_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
) -> list[SnapshotOut]:
    return [
        SnapshotOut(
            id=m.id,
            campaign_id=m.campaign_id,
            label_stream=m.label_stream,
            code_version=m.code_version,
            data_version=m.data_version,
            created_at=m.created_at,
        )
        for m in service.list_meta(session, campaign_id=campaign_id)
    ]


@api_router.get(
    "/snapshots/worker", summary="The background recompute worker's queue and recent runs"
)
def worker_status(app: AppStateDep, who: AdminUser) -> WorkerOut:
    return _worker(app.snapshot_worker)


@page_router.post("/leaderboard/{campaign_id}/recompute", include_in_schema=False)
def recompute_page(
    campaign_id: DbId,
    session: SessionDep,
    app: AppStateDep,
    who: AdminUser,
    state: SessionStateDep,
) -> Response:
    """The admin's button on the leaderboard page: queue and come back."""
    if session.get(Campaign, campaign_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "campaign not found")
    app.snapshot_worker.request(campaign_id)
    state.flash("Recomputing the leaderboard in the background: reload in a moment.")
    return RedirectResponse(f"/leaderboard/{campaign_id}", status_code=303)
