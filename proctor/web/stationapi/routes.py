"""The station API's routes (``/api/station/v1``): a station host's calls.

Each route takes the calling station (``auth.CallingStation``: its own
``pst_`` token) and hands the work to ``proctor.scheduler.station_api``; the
request and reply bodies are the wire's models (``proctor.core.station_api_wire``),
so bad input is a 422 naming the field and the OpenAPI document shows what a
station sends. Claiming and abandoning change the schedule, so they need an
``Idempotency-Key``: a retry after a lost reply gets the first answer.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path

from proctor.core import station_api_wire as wire
from proctor.core.errors import FieldError
from proctor.scheduler import station_api
from proctor.web.deps import NowDep, SessionDep, SettingsDep
from proctor.web.errors import error_responses
from proctor.web.stationapi import uploads
from proctor.web.stationapi.auth import CallingStation

api_router = APIRouter(
    prefix="/station/v1", tags=["station"], responses=error_responses(401, 403, 404, 409)
)
api_router.include_router(uploads.router)

IdempotencyKey = Annotated[
    str,
    Header(
        alias=wire.IDEMPOTENCY_HEADER,
        pattern=wire.IDEMPOTENCY_KEY.pattern,
        description="the station's key for this call: a repeated key gets the first answer",
    ),
]
RunCode = Annotated[str, Path(max_length=16)]


@api_router.post("/hello")
def hello(
    body: wire.Hello,
    caller: CallingStation,
    session: SessionDep,
    settings: SettingsDep,
    now: NowDep,
) -> wire.HelloReply:
    """Register or heartbeat: the station's profile, cell, software and clock."""
    return station_api.hello(session, caller.station_id, body, now, settings=settings.scheduler)


@api_router.post("/claims")
def claim(
    body: wire.ClaimRequest,
    caller: CallingStation,
    key: IdempotencyKey,
    session: SessionDep,
    settings: SettingsDep,
    now: NowDep,
) -> wire.ClaimReply:
    """The station's next run of the campaign (the one it holds, first)."""
    answer = station_api.once(
        session,
        station_id=caller.station_id,
        key=key,
        route="POST /claims",
        now=now,
        act=lambda: station_api.claim(
            session, caller.station_id, body, now=now, lease_s=settings.scheduler.claim_lease_s
        ),
    )
    return wire.ClaimReply.model_validate(answer)


@api_router.post("/claims/{run_code}/abandon")
def abandon(
    run_code: RunCode,
    body: wire.AbandonRequest,
    caller: CallingStation,
    key: IdempotencyKey,
    session: SessionDep,
    settings: SettingsDep,
    now: NowDep,
) -> wire.AbandonReply:
    """A claimed run never started (its pre-flight failed): rescheduled later."""

    def act() -> wire.AbandonReply:
        rescheduled = station_api.abandon(
            session,
            caller.station_id,
            run_code,
            body.reason,
            now=now,
            lease_s=settings.scheduler.claim_lease_s,
            retry_s=settings.scheduler.preflight_retry_s,
            retry_max_s=settings.scheduler.preflight_retry_max_s,
        )
        return wire.AbandonReply(run_code=run_code, rescheduled=rescheduled)

    answer = station_api.once(
        session,
        station_id=caller.station_id,
        key=key,
        route=f"POST /claims/{run_code}/abandon",
        now=now,
        act=act,
    )
    return wire.AbandonReply.model_validate(answer)


@api_router.put("/episodes/{uid}")
def sync_episode(
    uid: Annotated[str, Path(max_length=32)],
    body: wire.EpisodeWire,
    caller: CallingStation,
    session: SessionDep,
    settings: SettingsDep,
    now: NowDep,
) -> wire.EpisodeReply:
    """The episode as the station's ledger holds it now (a replay changes nothing)."""
    if uid != body.uid:
        raise FieldError("uid", "the path's uid and the body's differ")
    return station_api.sync_episode(session, caller.station_id, body, settings.scheduler, now=now)
