"""Reading an episode's recording back from the artifact store.

The annotator, the run explorer and the ``.rrd`` exporter start here, so the
names they read are exactly the recorder's (``proctor.core.recording.keys``). Every read
goes through the store's verified path: a corrupted file is an error, never
silently used.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Artifact, Episode
from proctor.core.domain import ArtifactKind
from proctor.core.errors import UsageError


def read_parquet(store: ArtifactStore, sha256: str) -> pa.Table:
    return pq.read_table(io.BytesIO(store.read_bytes(sha256)))


def read_json(store: ArtifactStore, sha256: str) -> dict[str, Any]:
    return json.loads(store.read_bytes(sha256))


@dataclass
class Recording:
    episode_uid: str
    clock_start_s: float | None
    artifacts: list[Artifact]
    store: ArtifactStore
    manifest: dict[str, Any]
    telemetry: pa.Table | None
    frames: dict[str, pa.Table]
    ground_truth: dict[str, Any] | None
    _tmp: list[Path] = field(default_factory=list)

    def column(self, name: str) -> np.ndarray:
        """A telemetry column as numpy (bools as bool, dictionary strings as str)."""
        if self.telemetry is None:
            raise UsageError(f"episode {self.episode_uid}: no telemetry recorded")
        col = self.telemetry.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(pa.string())
        return col.to_numpy(zero_copy_only=False)

    def artifact(self, kind: ArtifactKind, camera: str | None = None) -> Artifact:
        for a in self.artifacts:
            if a.kind == kind and a.camera == camera:
                return a
        what = f"{kind.value}" + (f" of camera {camera}" if camera else "")
        raise UsageError(f"episode {self.episode_uid}: no {what} recorded")

    def video_path(self, camera: str) -> Path:
        """A local file with the camera's MP4 (verified; copied out of remote stores)."""
        art = self.artifact(ArtifactKind.video, camera)
        local = self.store.local_path(art.sha256)
        if local is not None:
            self.store.verify(art.sha256)
            return local
        tmp = Path(tempfile.mkdtemp(prefix="proctor-video-"))
        self._tmp.append(tmp)
        path = tmp / f"{camera}.mp4"
        with self.store.open_verified(art.sha256) as chunks, path.open("wb") as f:
            for chunk in chunks:
                f.write(chunk)
        return path

    def close(self) -> None:
        for tmp in self._tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        self._tmp = []


def _episode(session: ProctorSession, episode: Episode | int | str) -> Episode:
    if isinstance(episode, Episode):
        return episode
    if isinstance(episode, int):
        found = session.get(Episode, episode)
    else:
        found = session.scalar(sa.select(Episode).where(Episode.uid == episode))
    if found is None:
        raise UsageError(f"episode: no episode {episode!r}")
    return found


def load_recording(
    session: ProctorSession, store: ArtifactStore, episode: Episode | int | str
) -> Recording:
    """Everything recorded for an episode (by row, id or uid)."""
    ep = _episode(session, episode)
    artifacts = list(
        session.scalars(
            sa.select(Artifact).where(Artifact.episode_id == ep.id).order_by(Artifact.id)
        )
    )
    by_kind: dict[tuple[ArtifactKind, str | None], Artifact] = {
        (a.kind, a.camera): a for a in artifacts
    }
    manifest_art = by_kind.get((ArtifactKind.manifest, None))
    telemetry_art = by_kind.get((ArtifactKind.telemetry, None))
    truth_art = by_kind.get((ArtifactKind.ground_truth, None))
    frames = {
        a.camera: read_parquet(store, a.sha256)
        for a in artifacts
        if a.kind == ArtifactKind.frame_index and a.camera is not None
    }
    return Recording(
        episode_uid=ep.uid,
        clock_start_s=ep.clock_start_s,
        artifacts=artifacts,
        store=store,
        manifest=read_json(store, manifest_art.sha256) if manifest_art else {},
        telemetry=read_parquet(store, telemetry_art.sha256) if telemetry_art else None,
        frames=frames,
        ground_truth=read_json(store, truth_art.sha256) if truth_art else None,
    )


def load_telemetry(
    session: ProctorSession, store: ArtifactStore, episode: Episode | int | str
) -> pa.Table:
    """Just the telemetry table (what the release detector needs)."""
    ep = _episode(session, episode)
    art = session.scalar(
        sa.select(Artifact).where(
            Artifact.episode_id == ep.id, Artifact.kind == ArtifactKind.telemetry
        )
    )
    if art is None:
        raise UsageError(f"episode {ep.uid}: no telemetry recorded")
    return read_parquet(store, art.sha256)


def load_ground_truth(
    session: ProctorSession, store: ArtifactStore, episode: Episode | int | str
) -> dict[str, Any] | None:
    ep = _episode(session, episode)
    art = session.scalar(
        sa.select(Artifact).where(
            Artifact.episode_id == ep.id, Artifact.kind == ArtifactKind.ground_truth
        )
    )
    return read_json(store, art.sha256) if art is not None else None
