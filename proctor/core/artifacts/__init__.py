"""The artifact store: videos, telemetry, manifests, checkpoints.

Objects are content addressed (``objects/ab/<sha256>``) and written whole or
not at all. Large artifacts from station hosts arrive by a resumable
multipart upload instead (``multipart``): on an S3-compatible store the
station sends each part to a presigned URL, so the bytes never pass through
the server and the station holds no store credentials; on a local folder the
parts come through the server. Either way the joined object is staged under
``uploads/`` and reaches its content address only after its size and sha256
are checked (``MultipartBackend.finish``).
"""

from __future__ import annotations

from pathlib import Path

from proctor.core.artifacts.base import ArtifactStore, StoredObject
from proctor.core.artifacts.local import LocalArtifactStore


def open_store(location: str, *, public_endpoint: str | None = None) -> ArtifactStore:
    """A local folder (a path or ``file://``), or any fsspec URL.
    ``public_endpoint``: where uploaders reach an S3 store, if not at the
    server's endpoint (``FsspecArtifactStore``); unused by a local folder, whose
    parts come through the server."""
    if "://" not in location:
        return LocalArtifactStore(Path(location))
    if location.startswith("file://"):
        return LocalArtifactStore(Path(location.removeprefix("file://")))
    from proctor.core.artifacts.fsspec_store import FsspecArtifactStore

    return FsspecArtifactStore(location, public_endpoint=public_endpoint)


__all__ = ["ArtifactStore", "LocalArtifactStore", "StoredObject", "open_store"]
