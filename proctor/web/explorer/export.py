"""The ``.rrd`` of an episode, built from its stored recording on first
request and kept in the artifact store (kind ``rrd``) for the next one.

``episode_rrd(session, store, episode, locks=…, tables=…)`` builds it; the
explorer's route passes its app's ``EpisodeLocks`` and parsed-table cache
(``AppState.rrd_locks``, ``AppState.artifact_cache.tables``).
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import (
    AnnotationCandidate,
    Artifact,
    Episode,
    EpisodeEvent,
    ObjectType,
    PlacementEvent,
)
from proctor.core.domain import ArtifactKind, PlacementStatus
from proctor.core.errors import ProctorError
from proctor.core.recording import keys
from proctor.web.artifacts import redaction
from proctor.web.artifacts.service import TableCache
from proctor.web.explorer.rrd import RRD_FORMAT, Marker, RrdInput, build_rrd

RRD_MEDIA_TYPE = "application/x-rerun"


class EpisodeLocks:
    """One lock per episode uid, for one app: two requests for the same
    episode's ``.rrd`` build it once (the second waits, then finds it
    stored). A uid's lock lives while someone holds or waits for it, so the
    table does not grow with every episode ever asked for."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[threading.Lock, int]] = {}  # uid -> lock, holders + waiters
        self._guard = threading.Lock()

    @contextmanager
    def hold(self, uid: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(uid, (threading.Lock(), 0))
            self._locks[uid] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[uid]
                if users == 1:
                    del self._locks[uid]
                else:
                    self._locks[uid] = (lock, users - 1)

    def __len__(self) -> int:
        """How many uids are held or waited for now."""
        with self._guard:
            return len(self._locks)


def cached_rrd(
    session: ProctorSession, episode: Episode, *, redacted: bool = False
) -> Artifact | None:
    """The stored ``.rrd`` of the episode: the full one, or the copy for
    operators and reviewers before release (``redacted``: no policy timing,
    no description of the policy; ``proctor.web.artifacts.redaction``)."""
    rows = session.scalars(
        sa.select(Artifact)
        .where(Artifact.episode_id == episode.id, Artifact.kind == ArtifactKind.rrd)
        .order_by(Artifact.id.desc())
    )
    for row in rows:
        details = row.details or {}
        if details.get("format") == RRD_FORMAT and bool(details.get("redacted")) == redacted:
            return row
    return None


def _local(store: ArtifactStore, sha256: str, scratch: Path, name: str) -> Path:
    path = store.local_path(sha256)
    if path is not None and path.is_file():
        return path
    out = scratch / name
    out.write_bytes(store.read_bytes(sha256))
    return out


def rrd_input(
    session: ProctorSession,
    store: ArtifactStore,
    episode: Episode,
    scratch: Path,
    *,
    tables: TableCache,
    redacted: bool = False,
) -> RrdInput:
    arts = list(
        session.scalars(
            sa.select(Artifact).where(Artifact.episode_id == episode.id).order_by(Artifact.id)
        )
    )
    videos = {a.camera: a for a in arts if a.kind == ArtifactKind.video and a.camera}
    frame_tables = {a.camera: a for a in arts if a.kind == ArtifactKind.frame_index and a.camera}
    telemetry = [a for a in arts if a.kind == ArtifactKind.telemetry]
    if not videos and not telemetry:
        raise ProctorError(f"episode {episode.uid}: nothing was recorded")
    tel = tables.get(store, telemetry[-1].sha256) if telemetry else None
    if tel is not None:
        tel = redaction.telemetry_table(tel, redacted=redacted)
    t0 = episode.clock_start_s
    if t0 is None:
        t0 = float(tel.column(keys.T)[0].as_py()) if tel is not None and tel.num_rows else 0.0
    obj = session.get(ObjectType, episode.object_type_id)
    placements = [
        Marker(p.t_s, f"placement ({p.source.value}, {p.status.value})")
        for p in session.scalars(
            sa.select(PlacementEvent)
            .where(
                PlacementEvent.episode_id == episode.id,
                PlacementEvent.status.in_(
                    [PlacementStatus.confirmed, PlacementStatus.accepted, PlacementStatus.proposed]
                ),
            )
            .order_by(PlacementEvent.t_s)
        )
    ]
    candidates = [
        Marker(
            c.t_s,
            f"candidate {c.kind} over {c.zone or '?'}: {c.verdict.value} ({c.rule})",
            "DEBUG",
        )
        for c in session.scalars(
            sa.select(AnnotationCandidate)
            .where(AnnotationCandidate.episode_id == episode.id)
            .order_by(AnnotationCandidate.t_s)
        )
    ]
    log = [
        Marker(
            e.t_s,
            f"{e.kind}: {redaction.event_message(e.kind, e.message, redacted=redacted)}",
            "WARN" if "stop" in e.kind or e.kind == keys.ENVELOPE_EVENT else "INFO",
        )
        for e in session.scalars(
            sa.select(EpisodeEvent)
            .where(EpisodeEvent.episode_id == episode.id)
            .order_by(EpisodeEvent.t_s.asc().nulls_last(), EpisodeEvent.id)
        )
        if e.t_s is not None
    ]
    return RrdInput(
        uid=episode.uid,
        title=" · ".join(x for x in (episode.run_code, obj.name if obj else None) if x),
        clock_start_s=float(t0),
        videos={cam: _local(store, a.sha256, scratch, f"{cam}.mp4") for cam, a in videos.items()},
        frame_pts={
            cam: tables.get(store, a.sha256).column(keys.FRAME_PTS).to_numpy(zero_copy_only=False)
            for cam, a in frame_tables.items()
            if cam in videos
        },
        telemetry=tel,
        placements=placements,
        candidates=candidates,
        log=log,
    )


def episode_rrd(
    session: ProctorSession,
    store: ArtifactStore,
    episode: Episode,
    *,
    locks: EpisodeLocks,
    tables: TableCache,
    redacted: bool = False,
) -> Artifact:
    """The episode's ``.rrd`` artifact, built now if it is not stored yet
    (added to the caller's transaction); ``redacted``: the copy for operators
    and reviewers before release (``cached_rrd``). ``locks`` keep two builds
    of one episode from running at once; ``tables`` is the parsed-table cache
    to read the recording through."""
    with locks.hold(episode.uid):
        row = cached_rrd(session, episode, redacted=redacted)
        if row is not None and store.exists(row.sha256):
            return row
        with tempfile.TemporaryDirectory(prefix="proctor-rrd-") as tmp:
            scratch = Path(tmp)
            data = rrd_input(session, store, episode, scratch, tables=tables, redacted=redacted)
            summary = build_rrd(data, scratch / f"{episode.uid}.rrd")
            stored = store.put_file(summary.path)
        row = Artifact(
            episode_id=episode.id,
            kind=ArtifactKind.rrd,
            uri=stored.uri,
            sha256=stored.sha256,
            size_bytes=stored.size_bytes,
            media_type=RRD_MEDIA_TYPE,
            details={
                "format": RRD_FORMAT,
                "frames": summary.frames,
                "telemetry_rows": summary.telemetry_rows,
                "markers": summary.markers,
                **({"redacted": True} if redacted else {}),
            },
        )
        session.add(row)
        session.flush()
        return row
