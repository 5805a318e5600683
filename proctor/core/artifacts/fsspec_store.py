"""Artifacts in any fsspec filesystem (S3-compatible stores in production)."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any, BinaryIO

import fsspec

from proctor.core.artifacts.base import ArtifactStore, StoredObject, check_sha256, hash_stream_to
from proctor.core.errors import IntegrityError, UsageError


class FsspecArtifactStore(ArtifactStore):
    """``url`` such as ``s3://bucket/prefix``; ``storage_options`` go to fsspec
    (endpoint, credentials — from the environment, never the config file).
    ``public_endpoint``: the endpoint that uploaders outside the server's
    network reach, which presigned URLs are signed for (default: the store's
    own; ``Settings.artifacts_public_endpoint``)."""

    def __init__(
        self, url: str, *, public_endpoint: str | None = None, **storage_options: Any
    ) -> None:
        self.url = url.rstrip("/")
        self.public_endpoint = public_endpoint
        self.fs, self._root = fsspec.core.url_to_fs(self.url, **storage_options)
        self._root = self._root.rstrip("/")
        self._protocol = url.split("://", 1)[0]

    @property
    def kind(self) -> str:
        return self._protocol

    @property
    def root(self) -> str:
        """Where the store's keys start: ``bucket/prefix`` on S3."""
        return self._root

    def _key(self, sha256: str) -> str:
        check_sha256(sha256)
        return f"{self._root}/objects/{sha256[:2]}/{sha256}"

    def put_stream(self, stream: BinaryIO, *, expected_sha256: str | None = None) -> StoredObject:
        if expected_sha256 is not None:
            check_sha256(expected_sha256)
        # hash locally first so that nothing reaches the store under a wrong key
        with tempfile.NamedTemporaryFile(prefix="proctor-artifact-", delete=False) as f:
            local = Path(f.name)
            sha256, size = hash_stream_to(stream, f)
        try:
            if expected_sha256 is not None and sha256 != expected_sha256:
                raise UsageError(
                    f"sha256: the upload hashes to {sha256}, not the declared {expected_sha256}"
                )
            final = self._key(sha256)
            if not self.fs.exists(final):
                # upload under a temporary key, then move: readers never see a
                # partial object (a server-side copy on S3, a rename on disks)
                tmp_key = f"{self._root}/tmp/{uuid.uuid4().hex}.part"
                # folders matter on disk-like filesystems; a no-op on object stores
                self.fs.makedirs(f"{self._root}/tmp", exist_ok=True)
                self.fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
                self.fs.put_file(str(local), tmp_key)
                try:
                    self.fs.mv(tmp_key, final)
                finally:
                    if self.fs.exists(tmp_key):
                        self.fs.rm(tmp_key)
            return StoredObject(sha256=sha256, size_bytes=size, uri=self.uri_for(sha256))
        finally:
            local.unlink(missing_ok=True)

    def exists(self, sha256: str) -> bool:
        return bool(self.fs.exists(self._key(sha256)))

    def size(self, sha256: str) -> int:
        return int(self.fs.size(self._key(sha256)))

    def uri_for(self, sha256: str) -> str:
        return f"{self._protocol}://{self._key(sha256)}"

    def key_for(self, sha256: str) -> str:
        """The object's path in the filesystem (``bucket/prefix/objects/ab/<sha>``)."""
        return self._key(sha256)

    def _open_raw(self, sha256: str) -> BinaryIO:
        key = self._key(sha256)
        if not self.fs.exists(key):
            raise IntegrityError(f"artifact {sha256}: not in the store")
        return self.fs.open(key, "rb")
