"""Artifact bytes by sha256 (HTTP Range for video seeking), and an
episode's frame tables and telemetry as JSON columns.

Access follows ``proctor.web.artifacts.access``: public once the episode's campaign
is released, staff only before, 404 otherwise (unknown and hidden look the
same).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request, status
from fastapi.responses import Response
from pydantic import BaseModel, Field

from proctor.core.domain import ArtifactKind
from proctor.core.recording import keys
from proctor.web.artifacts import redaction
from proctor.web.artifacts import telemetry as tel
from proctor.web.artifacts.access import EpisodeAccess, cache_control, visible_episode
from proctor.web.artifacts.responses import serve_artifact, serve_copy
from proctor.web.artifacts.service import latest_artifact, visible_artifact
from proctor.web.deps import ArtifactCacheDep, OptionalUser, SessionDep, StoreDep
from proctor.web.errors import error_responses

api_router = APIRouter(tags=["recordings"], responses=error_responses(404))

Sha256 = Annotated[
    str, Path(pattern=r"^[0-9a-f]{64}$", description="the artifact's sha256 (64 lowercase hex)")
]
EpisodeUid = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,32}$", description="the episode's uid")]
Camera = Annotated[
    str, Path(pattern=r"^[a-z][a-z0-9_]{0,31}$", description="camera name: exterior or wrist")
]


_BYTES_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "the whole object", "content": {"application/octet-stream": {}}},
    206: {"description": "the requested byte range"},
    304: {"description": "not modified (If-None-Match)"},
    416: {"description": "range not satisfiable"},
}


@api_router.get(
    "/artifacts/{sha256}",
    summary="An artifact's bytes (Range requests supported)",
    response_class=Response,
    responses=_BYTES_RESPONSES,
)
@api_router.head(
    "/artifacts/{sha256}",
    # one function serves both methods; OpenAPI needs an operation id for each
    operation_id="artifact_headers_api_artifacts__sha256__head",
    summary="An artifact's headers only: size, type, ETag (what a GET would send)",
    response_class=Response,
    responses=_BYTES_RESPONSES,
)
def artifact_bytes(
    sha256: Sha256,
    request: Request,
    session: SessionDep,
    store: StoreDep,
    who: OptionalUser,
    cache: ArtifactCacheDep,
    download: Annotated[
        bool, Query(description="send as an attachment (a file download) rather than inline")
    ] = False,
) -> Response:
    found = visible_artifact(session, sha256, who)
    if found.access.redacted and found.row.kind in redaction.REDACTED_KINDS:
        # operators and reviewers, before release: a copy without what describes the policy
        key = ("redacted", found.row.sha256)
        body = cache.json.get(key)
        if body is None:
            raw = store.read_bytes(found.row.sha256)
            body = cache.json.put(key, redaction.artifact_bytes(found.row.kind, raw))
        return serve_copy(request, found, body, download=download)
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


def _json(body: bytes, access: EpisodeAccess) -> Response:
    return Response(
        body, media_type="application/json", headers={"cache-control": cache_control(access)}
    )


@api_router.get(
    "/episodes/{uid}/frames/{camera}",
    summary="A camera's per-frame timestamp table",
    response_model=FrameTableOut,
)
def frame_table(
    uid: EpisodeUid,
    camera: Camera,
    session: SessionDep,
    store: StoreDep,
    who: OptionalUser,
    cache: ArtifactCacheDep,
) -> Response:
    episode, access = visible_episode(session, uid, who)
    row = latest_artifact(session, episode, ArtifactKind.frame_index, camera)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"camera {camera}: no frame table")
    video = latest_artifact(session, episode, ArtifactKind.video, camera)
    # stored tables never change: the JSON of one is cached by its sha256
    key = ("frames", row.sha256, episode.uid, camera, video.sha256 if video else None)
    body = cache.json.get(key)
    if body is None:
        out = FrameTableOut(
            episode=episode.uid,
            camera=camera,
            video_sha256=video.sha256 if video else None,
            **tel.frame_columns(cache.tables.get(store, row.sha256)),
        )
        body = cache.json.put(key, out.model_dump_json().encode())
    return _json(body, access)


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
    response_model=TelemetryOut,
)
def episode_telemetry(
    uid: EpisodeUid,
    session: SessionDep,
    store: StoreDep,
    who: OptionalUser,
    cache: ArtifactCacheDep,
    columns: Annotated[
        str | None,
        Query(description="comma-separated column names (default: what the explorer plots)"),
    ] = None,
    start: Annotated[float | None, Query(description="window start, s since episode start")] = None,
    end: Annotated[float | None, Query(description="window end, s since episode start")] = None,
    max_points: Annotated[int, Query(ge=tel.MIN_POINTS, le=tel.MAX_POINTS)] = 2000,
) -> Response:
    names = tel.parse_columns(columns)
    episode, access = visible_episode(session, uid, who)
    # a policy's call timing is withheld from operators and reviewers before release
    names = redaction.telemetry_columns(names, redacted=access.redacted)
    row = latest_artifact(session, episode, ArtifactKind.telemetry)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "this episode has no telemetry")
    key = ("telemetry", row.sha256, episode.clock_start_s, names, start, end, max_points)
    cached = cache.json.get(key)
    if cached is not None:
        return _json(cached, access)
    table = cache.tables.get(store, row.sha256)
    t0 = episode.clock_start_s
    if t0 is None:
        t0 = float(table.column(keys.T)[0].as_py()) if table.num_rows else 0.0
    s = tel.series(table, t0=t0, columns=names, start=start, end=end, max_points=max_points)
    out = {
        "episode": episode.uid,
        "clock_start_s": t0,
        "rows": s.rows,
        "downsampled": s.downsampled,
        "bucket_s": s.bucket_s,
        "t": s.t,
        "columns": s.columns,
        "units": {c: tel.PLOTTABLE[c] for c in names},
    }
    # the shape is TelemetryOut's; plain json is 10× faster for these long float lists
    body = json.dumps(out, separators=(",", ":"), allow_nan=False).encode()
    return _json(cache.json.put(key, body), access)
