"""Artifacts in a local folder: ``objects/ab/abcdef…``."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import BinaryIO

from proctor.core.artifacts.base import ArtifactStore, StoredObject, check_sha256, hash_stream_to
from proctor.core.errors import IntegrityError, UsageError


class LocalArtifactStore(ArtifactStore):
    kind = "local"

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self._objects = self.root / "objects"
        self._tmp = self.root / "tmp"
        # checkpoints and recordings: for the server's own user only
        for folder in (self.root, self._objects, self._tmp):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, sha256: str) -> Path:
        check_sha256(sha256)
        return self._objects / sha256[:2] / sha256

    def put_stream(self, stream: BinaryIO, *, expected_sha256: str | None = None) -> StoredObject:
        if expected_sha256 is not None:
            check_sha256(expected_sha256)
        tmp = self._tmp / f"{uuid.uuid4().hex}.part"
        try:
            # write to a temp name, fsync, then rename: a crash at any point
            # leaves either no object or a complete one, never a partial one
            with os.fdopen(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600), "wb") as f:
                sha256, size = hash_stream_to(stream, f)
                f.flush()
                os.fsync(f.fileno())
            if expected_sha256 is not None and sha256 != expected_sha256:
                raise UsageError(
                    f"sha256: the upload hashes to {sha256}, not the declared {expected_sha256}"
                )
            final = self._path(sha256)
            final.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if final.exists():
                tmp.unlink()
            else:
                tmp.replace(final)
                _fsync_dir(final.parent)
            return StoredObject(sha256=sha256, size_bytes=size, uri=self.uri_for(sha256))
        finally:
            tmp.unlink(missing_ok=True)

    def exists(self, sha256: str) -> bool:
        return self._path(sha256).is_file()

    def size(self, sha256: str) -> int:
        return self._path(sha256).stat().st_size

    def uri_for(self, sha256: str) -> str:
        return self._path(sha256).as_uri()

    def local_path(self, sha256: str) -> Path | None:
        return self._path(sha256)

    def _open_raw(self, sha256: str) -> BinaryIO:
        try:
            return self._path(sha256).open("rb")
        except FileNotFoundError:
            raise IntegrityError(f"artifact {sha256}: not in the store") from None

    def clean_temporary(self, *, older_than_s: float = 0.0) -> int:
        """Remove leftovers of interrupted writes untouched for ``older_than_s``
        seconds (a write in progress in another process keeps its file's
        modification time fresh); returns how many."""
        removed = 0
        cutoff = time.time() - older_than_s
        for part in self._tmp.glob("*.part"):
            try:
                if older_than_s and part.stat().st_mtime > cutoff:
                    continue
                part.unlink()
            except FileNotFoundError:
                continue  # its writer finished (or another cleaner was first)
            removed += 1
        return removed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
