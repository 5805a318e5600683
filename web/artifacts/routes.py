"""Artifact bytes by sha256 (HTTP Range for video seeking), and an
episode's frame tables and telemetry as JSON columns.

Access follows ``web.artifacts.access``: public once the episode's campaign
is released, staff only before, 404 otherwise (unknown and hidden look the
same).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Request, status
from fastapi.responses import Response
from pydantic import BaseModel, Field

from proctor.domain import ArtifactKind
from station import keys
from web.artifacts import telemetry as tel
from web.artifacts.access import cache_control, visible_episode
from web.artifacts.service import TABLES, latest_artifact, visible_artifact
from web.artifacts.serving import serve_artifact
from web.deps import OptionalUser, SessionDep, StoreDep
from web.errors import error_responses

api_router = APIRouter(tags=["recordings"], responses=error_responses(404))

Sha256 = Annotated[
    str, Path(pattern=r"^[0-9a-f]{64}$", description="the artifact's sha256 (64 lowercase hex)")
]
EpisodeUid = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,32}$", description="the episode's uid")]
Camera = Annotated[
    str, Path(pattern=r"^[a-z][a-z0-9_]{0,31}$", description="camera name: exterior or wrist")
]


@api_router.api_route(
    "/artifacts/{sha256}",
    methods=["GET", "HEAD"],
    summary="An artifact's bytes (Range requests supported)",
    response_class=Response,
    responses={
        200: {"description": "the whole object", "content": {"application/octet-stream": {}}},
        206: {"description": "the requested byte range"},
        304: {"description": "not modified (If-None-Match)"},
        416: {"description": "range not satisfiable"},
    },
)
def artifact_bytes(
    sha256: Sha256,
    request: Request,
    session: SessionDep,
    store: StoreDep,
    who: OptionalUser,
    download: Annotated[
        bool, Query(description="send as an attachment (a file download) rather than inline")
    ] = False,
) -> Response:
    found = visible_artifact(session, sha256, who)
    return serve_artifact(request, store, found, download=download)


class FrameTableOut(BaseModel):
    episode: str
    camera: str
    frames: int = Field(description="frames in the MP4 (and rows here)")
    frame: list[int] = Field(description="frame index in the MP4, 0-based")
    pts_s: list[float] = Field(
        description="presentation time of each frame, s since the episode start "
        "(the time base of placement events and candidates)"
    )
    video_sha256: str | None = Field(description="the camera's MP4: /api/artifacts/{sha256}")


@api_router.get(
    "/episodes/{uid}/frames/{camera}",
    summary="A camera's per-frame timestamp table",
)
def frame_table(
    uid: EpisodeUid,
    camera: Camera,
    session: SessionDep,
    store: StoreDep,
    who: OptionalUser,
    response: Response,
) -> FrameTableOut:
    episode, access = visible_episode(session, uid, who)
    row = latest_artifact(session, episode, ArtifactKind.frame_index, camera)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"camera {camera}: no frame table")
    video = latest_artifact(session, episode, ArtifactKind.video, camera)
    cols = tel.frame_columns(TABLES.get(store, row.sha256))
    response.headers["cache-control"] = cache_control(access)
    return FrameTableOut(
        episode=episode.uid,
        camera=camera,
        video_sha256=video.sha256 if video else None,
        **cols,
    )


class TelemetryOut(BaseModel):
    episode: str
    clock_start_s: float = Field(description="the station-clock time of t = 0")
    rows: int = Field(description="samples in the window before downsampling")
    downsampled: bool
    bucket_s: float | None = Field(
        description="when downsampled: the bucket width, s; each bucket gives its "
        "minimum and maximum per column"
    )
    t: list[float | None] = Field(description="s since the episode start")
    columns: dict[str, list[float | None]]
    units: dict[str, str]


@api_router.get(
    "/episodes/{uid}/telemetry",
    summary="Telemetry columns for plotting, downsampled keeping extremes",
)
def episode_telemetry(
    uid: EpisodeUid,
    session: SessionDep,
    store: StoreDep,
    who: OptionalUser,
    response: Response,
    columns: Annotated[
        str | None,
        Query(description="comma-separated column names (default: what the explorer plots)"),
    ] = None,
    start: Annotated[float | None, Query(description="window start, s since episode start")] = None,
    end: Annotated[float | None, Query(description="window end, s since episode start")] = None,
    max_points: Annotated[int, Query(ge=tel.MIN_POINTS, le=tel.MAX_POINTS)] = 2000,
) -> TelemetryOut:
    names = tel.parse_columns(columns)
    episode, access = visible_episode(session, uid, who)
    row = latest_artifact(session, episode, ArtifactKind.telemetry)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "this episode has no telemetry")
    table = TABLES.get(store, row.sha256)
    t0 = episode.clock_start_s
    if t0 is None:
        t0 = float(table.column(keys.T)[0].as_py()) if table.num_rows else 0.0
    s = tel.series(table, t0=t0, columns=names, start=start, end=end, max_points=max_points)
    response.headers["cache-control"] = cache_control(access)
    return TelemetryOut(
        episode=episode.uid,
        clock_start_s=t0,
        rows=s.rows,
        downsampled=s.downsampled,
        bucket_s=s.bucket_s,
        t=s.t,
        columns=s.columns,
        units={c: tel.PLOTTABLE[c] for c in names},
    )
