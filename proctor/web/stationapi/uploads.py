"""The station API's artifact uploads (``proctor.scheduler.station_uploads``).

``POST /uploads`` begins (or resumes) an upload and answers its plan; ``GET
/uploads/{id}`` answers it again with fresh part URLs; ``PUT
/uploads/{id}/parts/{n}`` takes a part through this server when the store is
a local folder (an S3-compatible store takes the parts itself, at presigned
URLs); ``POST /uploads/{id}/complete`` verifies and registers. Every route
is the calling station's own: another station's upload is 403.

A part sent here is streamed into the store as it arrives, never held
whole: the store's writer runs in a worker thread and pulls the request
body from the event loop chunk by chunk (``_BodyReader``).
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

import anyio.from_thread
from fastapi import APIRouter, Depends, HTTPException, Path, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from proctor.core.artifacts.multipart import MAX_PARTS, part_length
from proctor.core.station_api_wire import (
    CompleteReply,
    CompleteRequest,
    PartDone,
    UploadPlan,
    UploadRequest,
)
from proctor.scheduler import station_uploads as service
from proctor.web.deps import NowDep, SessionDep, SettingsDep, StoreDep
from proctor.web.stationapi.auth import CallingStation

router = APIRouter()

UploadId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{8,64}$")]
PartNumber = Annotated[int, Path(ge=1, le=MAX_PARTS)]


@dataclass(frozen=True)
class Planning:
    """What a plan is made with: the server's upload limits, and this
    server's absolute URL for a part (used when the store is a local folder)."""

    limits: service.UploadLimits
    part_url: service.PartUrl


def planning(request: Request, settings: SettingsDep) -> Planning:
    def url(upload_id: str, number: int) -> str:
        return str(request.url_for("station_upload_part", upload_id=upload_id, n=str(number)))

    return Planning(service.UploadLimits.from_settings(settings.scheduler), url)


PlanningDep = Annotated[Planning, Depends(planning)]


@router.post("/uploads", response_model=UploadPlan)
def begin_upload(
    body: UploadRequest,
    station: CallingStation,
    session: SessionDep,
    store: StoreDep,
    plans: PlanningDep,
    now: NowDep,
) -> UploadPlan:
    return service.begin(
        session,
        store,
        station_id=station.station_id,
        request=body,
        limits=plans.limits,
        part_url=plans.part_url,
        now=now,
    )


@router.get("/uploads/{upload_id}", response_model=UploadPlan)
def get_upload(
    upload_id: UploadId,
    station: CallingStation,
    session: SessionDep,
    store: StoreDep,
    plans: PlanningDep,
) -> UploadPlan:
    return service.plan(
        session,
        store,
        station_id=station.station_id,
        upload_id=upload_id,
        limits=plans.limits,
        part_url=plans.part_url,
    )


class _BodyReader(io.RawIOBase):
    """The request body as a blocking stream, for a worker thread: each read
    waits on the event loop for the next chunk."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = b""
        self._done = False

    async def _next(self) -> bytes:
        return await self._chunks.__anext__()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending and not self._done:
            try:
                self._pending = anyio.from_thread.run(self._next)
            except StopAsyncIteration:
                self._done = True
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


@router.put("/uploads/{upload_id}/parts/{n}", name="station_upload_part", response_model=PartDone)
async def put_part(
    upload_id: UploadId,
    n: PartNumber,
    request: Request,
    response: Response,
    station: CallingStation,
    session: SessionDep,
    store: StoreDep,
) -> PartDone | Response:
    upload = await run_in_threadpool(
        service.part_upload, session, station_id=station.station_id, upload_id=upload_id
    )
    length = part_length(upload, n)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > length:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"part: part {n} of this upload is {length} bytes, not {declared}",
        )
    reader = io.BufferedReader(_BodyReader(request.stream()))
    try:
        etag = await run_in_threadpool(service.put_part, store, upload, n, reader)
    except ClientDisconnect:
        # nobody is listening; the part was not kept and is sent again on resume
        return Response(status_code=400)
    # the same header an S3 store answers a part with: one way to read it
    response.headers["ETag"] = f'"{etag}"'
    return PartDone(number=n, etag=etag)


@router.post("/uploads/{upload_id}/complete", response_model=CompleteReply)
def complete_upload(
    upload_id: UploadId,
    body: CompleteRequest,
    station: CallingStation,
    session: SessionDep,
    store: StoreDep,
    now: NowDep,
) -> CompleteReply:
    return service.complete(
        session,
        store,
        station_id=station.station_id,
        upload_id=upload_id,
        parts=body.parts,
        now=now,
    )
