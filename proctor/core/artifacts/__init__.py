"""The artifact store: videos, telemetry, manifests, checkpoints."""

from __future__ import annotations

from pathlib import Path

from proctor.core.artifacts.base import ArtifactStore, StoredObject
from proctor.core.artifacts.local import LocalArtifactStore


def open_store(location: str) -> ArtifactStore:
    """A local folder (a path or ``file://``), or any fsspec URL."""
    if "://" not in location:
        return LocalArtifactStore(Path(location))
    if location.startswith("file://"):
        return LocalArtifactStore(Path(location.removeprefix("file://")))
    from proctor.core.artifacts.fsspec_store import FsspecArtifactStore

    return FsspecArtifactStore(location)


__all__ = ["ArtifactStore", "LocalArtifactStore", "StoredObject", "open_store"]
