"""Artifact uploads from station hosts, with the server out of the data path.

A station host holds no store credentials. It declares the artifact (its
episode, sha256, size, kind) and gets a plan: one target per part, a
presigned store URL on S3 or this server's part route on a local store
(``proctor.core.artifacts.multipart``). When every part is in, the server
joins them, reads the whole once to check the declared size and sha256, and
only then moves it to its content address and registers the ``Artifact``
row, in the same transaction as the upload's own state.

Every call is safe to repeat. ``begin`` for an (episode, sha256) with an
open upload returns that upload with the parts the store already holds (a
station that lost its connection resumes); for an artifact already
registered it answers ``complete=True`` and nothing to send. A repeated
``complete`` gives the same answer and registers nothing twice.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from proctor.core.artifacts import ArtifactStore
from proctor.core.artifacts.multipart import (
    MAX_PARTS,
    MultipartBackend,
    MultipartUpload,
    multipart_for,
    part_count,
)
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Artifact, Episode, StationUpload
from proctor.core.domain import ArtifactKind, StationUploadState
from proctor.core.errors import (
    Conflict,
    FieldError,
    FieldForbidden,
    FieldNotFound,
)
from proctor.core.settings import SchedulerSettings
from proctor.core.station_api_wire import (
    CompleteReply,
    PartDone,
    PartTarget,
    UploadPlan,
    UploadRequest,
)

# (upload id, part number) -> this server's absolute URL for the part
PartUrl = Callable[[str, int], str]


@dataclass(frozen=True)
class UploadLimits:
    max_bytes: int
    part_size: int
    url_expiry_s: int

    @classmethod
    def from_settings(cls, settings: SchedulerSettings) -> UploadLimits:
        return cls(
            max_bytes=settings.upload_max_bytes,
            part_size=settings.upload_part_bytes,
            url_expiry_s=settings.upload_url_expiry_s,
        )


def _kind(value: str) -> ArtifactKind:
    try:
        return ArtifactKind(value)
    except ValueError:
        raise FieldError(
            "kind", f"'{value}' is not one of {', '.join(k.value for k in ArtifactKind)}"
        ) from None


def _episode(session: ProctorSession, station_id: int, uid: str) -> Episode:
    episode = session.scalar(sa.select(Episode).where(Episode.uid == uid))
    if episode is None:
        raise FieldNotFound("episode_uid", f"no episode '{uid}'")
    if episode.station_id != station_id:
        raise FieldForbidden("episode_uid", f"episode '{uid}' is not this station's")
    return episode


def _check_size(request: UploadRequest, limits: UploadLimits) -> None:
    if request.size_bytes > limits.max_bytes:
        raise FieldError(
            "size_bytes", f"{request.size_bytes} bytes is over this server's {limits.max_bytes}"
        )
    if part_count(request.size_bytes, limits.part_size) > MAX_PARTS:
        raise FieldError("size_bytes", f"more than {MAX_PARTS} parts of {limits.part_size} bytes")


def multipart_of(row: StationUpload) -> MultipartUpload:
    """The store's multipart upload the row names."""
    return MultipartUpload(
        key=row.id, backend_id=row.backend_id, size=row.size_bytes, part_size=row.part_size
    )


def _registered(
    session: ProctorSession,
    episode_id: int,
    sha256: str,
    *,
    kind: ArtifactKind | None = None,
    camera: str | None = None,
) -> Artifact | None:
    """The episode's artifact with these bytes (and, given a kind, that kind and
    camera): two artifacts of one episode can share bytes (the frame tables of
    two cameras at one rate are often identical), and each is a row of its own."""
    query = sa.select(Artifact).where(Artifact.episode_id == episode_id, Artifact.sha256 == sha256)
    if kind is not None:
        query = query.where(
            Artifact.kind == kind,
            Artifact.camera.is_(None) if camera is None else Artifact.camera == camera,
        )
    return session.scalar(query.order_by(Artifact.id).limit(1))


def _upload_row(
    session: ProctorSession, episode_id: int, sha256: str, state: StationUploadState
) -> StationUpload | None:
    return session.scalar(
        sa.select(StationUpload)
        .where(
            StationUpload.episode_id == episode_id,
            StationUpload.sha256 == sha256,
            StationUpload.state == state,
        )
        .order_by(StationUpload.created_at.desc())
        .limit(1)
    )


def begin(
    session: ProctorSession,
    store: ArtifactStore,
    *,
    station_id: int,
    request: UploadRequest,
    limits: UploadLimits,
    part_url: PartUrl,
    now: datetime,
) -> UploadPlan:
    """Begin an upload, or resume the open one of the same artifact."""
    kind = _kind(request.kind)
    episode = _episode(session, station_id, request.episode_uid)
    _check_size(request, limits)
    same_bytes = _registered(session, episode.id, request.sha256)
    if same_bytes is not None and same_bytes.size_bytes != request.size_bytes:
        raise FieldError(
            "size_bytes",
            f"this sha256 is registered with {same_bytes.size_bytes} bytes, not "
            f"{request.size_bytes}",
        )
    if same_bytes is not None:
        if (
            _registered(session, episode.id, request.sha256, kind=kind, camera=request.camera)
            is None
        ):
            # the bytes are in the store, verified when they came: this artifact
            # is another name for them, registered without sending them again
            _register_request(session, episode.id, request, kind, same_bytes.uri)
        done = _upload_row(session, episode.id, request.sha256, StationUploadState.complete)
        return UploadPlan(
            upload_id=done.id if done else "",
            part_size=done.part_size if done else limits.part_size,
            parts=[],
            complete=True,
        )
    row = _upload_row(session, episode.id, request.sha256, StationUploadState.open)
    if row is None:
        row = _open(session, store, station_id, episode, request, kind, limits, now)
    elif row.size_bytes != request.size_bytes:
        raise FieldError(
            "size_bytes",
            f"the open upload of this sha256 declares {row.size_bytes} bytes, not "
            f"{request.size_bytes}",
        )
    return _plan(multipart_for(store), row, limits, part_url)


def _open(
    session: ProctorSession,
    store: ArtifactStore,
    station_id: int,
    episode: Episode,
    request: UploadRequest,
    kind: ArtifactKind,
    limits: UploadLimits,
    now: datetime,
) -> StationUpload:
    upload_id = secrets.token_urlsafe(16)  # 22 characters, unguessable
    backend = multipart_for(store)
    backend_id = backend.begin(upload_id, request.size_bytes, limits.part_size)
    row = StationUpload(
        id=upload_id,
        station_id=station_id,
        episode_id=episode.id,
        sha256=request.sha256,
        size_bytes=request.size_bytes,
        kind=kind,
        camera=request.camera,
        media_type=request.media_type,
        frame_count=request.frame_count,
        details=dict(request.details),
        part_size=limits.part_size,
        backend_id=backend_id,
        state=StationUploadState.open,
        created_at=now,
    )
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        # another begin of the same artifact won the race: it holds the upload
        backend.abort(multipart_of(row))
        raise Conflict("sha256: this artifact's upload is being begun; ask again") from None
    return row


def _plan(
    backend: MultipartBackend, row: StationUpload, limits: UploadLimits, part_url: PartUrl
) -> UploadPlan:
    upload = multipart_of(row)
    received = backend.received_parts(upload)
    missing = [n for n in range(1, upload.part_count + 1) if n not in received]
    targets = [
        PartTarget(number=n, url=url, auth="store")
        if url is not None
        else PartTarget(number=n, url=part_url(row.id, n), auth="server")
        for n, url in backend.part_targets(upload, missing, limits.url_expiry_s)
    ]
    return UploadPlan(
        upload_id=row.id,
        part_size=row.part_size,
        parts=targets,
        received=sorted(received),
        received_etags=received,
    )


def _owned(
    session: ProctorSession, station_id: int, upload_id: str, *, lock: bool = False
) -> StationUpload:
    row = session.get(StationUpload, upload_id, with_for_update=lock)
    if row is None:
        raise FieldNotFound("upload_id", f"no upload '{upload_id}'")
    if row.station_id != station_id:
        raise FieldForbidden("upload_id", "this upload is another station's")
    return row


def _require_open(row: StationUpload) -> StationUpload:
    if row.state is not StationUploadState.open:
        raise Conflict(f"upload_id: the upload is {row.state.value}; begin again to send it")
    return row


def plan(
    session: ProctorSession,
    store: ArtifactStore,
    *,
    station_id: int,
    upload_id: str,
    limits: UploadLimits,
    part_url: PartUrl,
) -> UploadPlan:
    """The plan again: the parts still missing, with fresh URLs."""
    row = _owned(session, station_id, upload_id)
    if row.state is StationUploadState.complete:
        return UploadPlan(upload_id=row.id, part_size=row.part_size, parts=[], complete=True)
    return _plan(multipart_for(store), _require_open(row), limits, part_url)


def part_upload(session: ProctorSession, *, station_id: int, upload_id: str) -> MultipartUpload:
    """The open upload a part sent through the server goes to (the caller's own)."""
    return multipart_of(_require_open(_owned(session, station_id, upload_id)))


def put_part(store: ArtifactStore, upload: MultipartUpload, number: int, stream: BinaryIO) -> str:
    """Store one part sent through the server; returns its ETag."""
    return multipart_for(store).put_part(upload, number, stream)


def complete(
    session: ProctorSession,
    store: ArtifactStore,
    *,
    station_id: int,
    upload_id: str,
    parts: list[PartDone],
    now: datetime,
) -> CompleteReply:
    """Join, verify and register. On a size or sha256 mismatch the upload is
    aborted (a new ``begin`` starts afresh) and nothing is registered."""
    row = _owned(session, station_id, upload_id, lock=True)
    if row.state is StationUploadState.complete:
        return CompleteReply(sha256=row.sha256, size_bytes=row.size_bytes, registered=True)
    _require_open(row)
    uri = _verified_uri(session, store, row, parts, now)
    artifact = _registered(
        session, row.episode_id, row.sha256, kind=row.kind, camera=row.camera
    ) or _register(session, row, uri)
    row.state = StationUploadState.complete
    row.artifact_id = artifact.id
    row.completed_at = now
    session.flush()
    return CompleteReply(sha256=row.sha256, size_bytes=row.size_bytes, registered=True)


def _verified_uri(
    session: ProctorSession,
    store: ArtifactStore,
    row: StationUpload,
    parts: list[PartDone],
    now: datetime,
) -> str:
    """Join and verify the parts; the content address's URI."""
    backend = multipart_for(store)
    upload = multipart_of(row)
    if not backend.in_progress(upload) and store.exists(row.sha256):
        # verified and addressed by an earlier completion whose transaction
        # did not commit: only the registration is left to do
        return store.uri_for(row.sha256)
    staged = backend.complete(upload, [(p.number, p.etag) for p in parts])
    try:
        return backend.finish(staged, row.sha256, row.size_bytes).uri
    except FieldError:
        # the staged bytes are gone: the refusal must outlive the request's rollback
        row.state = StationUploadState.aborted
        row.completed_at = now
        session.commit()
        backend.abort(upload)
        raise


def _register_request(
    session: ProctorSession,
    episode_id: int,
    request: UploadRequest,
    kind: ArtifactKind,
    uri: str,
) -> None:
    session.add(
        Artifact(
            episode_id=episode_id,
            kind=kind,
            camera=request.camera,
            uri=uri,
            sha256=request.sha256,
            size_bytes=request.size_bytes,
            media_type=request.media_type,
            frame_count=request.frame_count,
            details=dict(request.details),
        )
    )
    session.flush()


def _register(session: ProctorSession, row: StationUpload, uri: str) -> Artifact:
    artifact = Artifact(
        episode_id=row.episode_id,
        kind=row.kind,
        camera=row.camera,
        uri=uri,
        sha256=row.sha256,
        size_bytes=row.size_bytes,
        media_type=row.media_type,
        frame_count=row.frame_count,
        details=dict(row.details or {}),
    )
    session.add(artifact)
    session.flush()
    return artifact
