"""Finding artifacts the caller may read, and reading recorded tables.

Stored objects are immutable (content addressed), so parsed Parquet tables
are cached by sha256 in a small LRU, and the JSON made of them by a key
naming the artifact and the view: the explorer and the review UI ask for
the same telemetry many times while someone scrubs through it. Each app
owns its caches (``ArtifactCache``, ``AppState.artifact_cache``), so an
object is only ever read from that app's own store.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
from fastapi import HTTPException, status

from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Artifact, Episode
from proctor.core.domain import ArtifactKind, Role
from proctor.web.artifacts.access import ADMIN_ONLY_KINDS, EpisodeAccess, episode_access, is_staff
from proctor.web.auth.identity import Principal

ARTIFACT_NOT_FOUND = "artifact not found"


@dataclass(frozen=True)
class VisibleArtifact:
    row: Artifact
    episode: Episode | None
    access: EpisodeAccess

    def filename(self) -> str:
        """A download name that carries nothing but the episode and the kind."""
        stem = self.episode.uid if self.episode is not None else self.row.sha256[:16]
        part = self.row.camera or self.row.kind.value
        return f"{stem}-{part}{_extension(self.row.media_type)}"


def _extension(media_type: str) -> str:
    return {
        "video/mp4": ".mp4",
        "application/json": ".json",
        "application/vnd.apache.parquet": ".parquet",
        "application/x-rerun": ".rrd",
    }.get(media_type, "")


def visible_artifact(
    session: ProctorSession, sha256: str, who: Principal | None
) -> VisibleArtifact:
    """An artifact row with this content that the caller may read, else 404.

    The same bytes may be registered more than once (two episodes sharing a
    scene photo); one visible registration is enough. Hidden and unknown
    objects get the same answer."""
    rows = session.scalars(
        sa.select(Artifact).where(Artifact.sha256 == sha256).order_by(Artifact.id)
    ).all()
    for row in rows:
        if row.kind in ADMIN_ONLY_KINDS:
            if who is not None and who.has_role(Role.admin):
                return VisibleArtifact(row, None, EpisodeAccess(visible=True, public=False))
            continue
        if row.episode_id is None:
            if is_staff(who):
                return VisibleArtifact(row, None, EpisodeAccess(visible=True, public=False))
            continue
        episode = session.get(Episode, row.episode_id)
        if episode is None:
            continue
        access = episode_access(session, episode, who)
        if (
            access.redacted
            and row.kind == ArtifactKind.rrd
            and not (row.details or {}).get("redacted")
        ):
            continue  # the full .rrd: operators and reviewers get the redacted one before release
        if access.visible:
            return VisibleArtifact(row, episode, access)
    raise HTTPException(status.HTTP_404_NOT_FOUND, ARTIFACT_NOT_FOUND)


def episode_artifacts(
    session: ProctorSession, episode: Episode, kind: ArtifactKind, camera: str | None = None
) -> list[Artifact]:
    q = sa.select(Artifact).where(Artifact.episode_id == episode.id, Artifact.kind == kind)
    if camera is not None:
        q = q.where(Artifact.camera == camera)
    return list(session.scalars(q.order_by(Artifact.id)))


def latest_artifact(
    session: ProctorSession, episode: Episode, kind: ArtifactKind, camera: str | None = None
) -> Artifact | None:
    rows = episode_artifacts(session, episode, kind, camera)
    return rows[-1] if rows else None


class TableCache:
    """Parsed Parquet artifacts by sha256 (immutable, so never stale)."""

    def __init__(self, capacity: int = 32) -> None:
        self.capacity = capacity
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, store: ArtifactStore, sha256: str) -> pa.Table:
        with self._lock:
            table = self._tables.get(sha256)
            if table is not None:
                self._tables.move_to_end(sha256)
                return table
        table = read_table(store, sha256)
        with self._lock:
            self._tables[sha256] = table
            while len(self._tables) > self.capacity:
                self._tables.popitem(last=False)
        return table


def read_table(store: ArtifactStore, sha256: str) -> pa.Table:
    path = store.local_path(sha256)
    if path is not None and path.is_file():
        return pq.read_table(path)
    # a remote store: read (and verify) the bytes
    return pq.read_table(io.BytesIO(store.read_bytes(sha256)))


class BytesCache:
    """Serialized JSON of immutable artifacts, by a key naming the artifact
    and the view of it (bounded by total size)."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[object, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: object) -> bytes | None:
        with self._lock:
            body = self._items.get(key)
            if body is not None:
                self._items.move_to_end(key)
            return body

    def put(self, key: object, body: bytes) -> bytes:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._size -= len(old)
            self._items[key] = body
            self._size += len(body)
            while self._size > self.max_bytes and len(self._items) > 1:
                _, dropped = self._items.popitem(last=False)
                self._size -= len(dropped)
        return body


@dataclass(frozen=True)
class ArtifactCache:
    """One app's caches of immutable artifacts: parsed tables, and the JSON
    served from them."""

    tables: TableCache = field(default_factory=TableCache)
    json: BytesCache = field(default_factory=BytesCache)
