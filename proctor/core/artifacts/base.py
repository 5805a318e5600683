"""The artifact store interface: content addressed by sha256."""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from proctor.core.errors import IntegrityError, UsageError

CHUNK = 1 << 20  # 1 MiB: large enough to stream multi-GB checkpoints quickly
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class StoredObject:
    sha256: str
    size_bytes: int
    uri: str


def check_sha256(value: str) -> str:
    if not _SHA256.match(value):
        raise UsageError(f"sha256: '{value}' is not 64 lowercase hex digits")
    return value


class ArtifactStore(ABC):
    """Immutable objects keyed by their sha256.

    Writes are atomic: an object is either absent or complete. Reads verify
    the hash, so a corrupted object is an error, never silently served.
    """

    @property
    @abstractmethod
    def kind(self) -> str:
        """What sort of store this is ("local", or an fsspec protocol such as
        "s3"): the key of its multipart backend (``artifacts.multipart``)."""

    @abstractmethod
    def put_stream(self, stream: BinaryIO, *, expected_sha256: str | None = None) -> StoredObject:
        """Store what the stream yields. With ``expected_sha256``, a mismatch
        raises and nothing is stored."""

    @abstractmethod
    def exists(self, sha256: str) -> bool: ...

    @abstractmethod
    def size(self, sha256: str) -> int: ...

    @abstractmethod
    def uri_for(self, sha256: str) -> str: ...

    @abstractmethod
    def _open_raw(self, sha256: str) -> BinaryIO: ...

    def clean_temporary(self, *, older_than_s: float = 0.0) -> int:
        """Remove leftovers of interrupted writes untouched for ``older_than_s``
        seconds; returns how many. Stores that stage nothing have none."""
        return 0

    def local_path(self, sha256: str) -> Path | None:
        """A filesystem path for the object if the store has one (lets the web
        app serve byte ranges of videos without copying)."""
        return None

    def put_file(self, path: Path, *, expected_sha256: str | None = None) -> StoredObject:
        with Path(path).open("rb") as f:
            return self.put_stream(f, expected_sha256=expected_sha256)

    def put_bytes(self, data: bytes) -> StoredObject:
        import io

        return self.put_stream(io.BytesIO(data))

    def read_bytes(self, sha256: str) -> bytes:
        with self._open_raw(check_sha256(sha256)) as f:
            data = f.read()
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise IntegrityError(f"artifact {sha256}: stored content hashes to {actual}")
        return data

    @contextmanager
    def open_verified(self, sha256: str) -> Iterator[Iterator[bytes]]:
        """Stream an object in chunks; raises IntegrityError after the last
        chunk if the content does not hash to ``sha256``."""
        check_sha256(sha256)

        def chunks(f: BinaryIO) -> Iterator[bytes]:
            digest = hashlib.sha256()
            while block := f.read(CHUNK):
                digest.update(block)
                yield block
            if digest.hexdigest() != sha256:
                raise IntegrityError(
                    f"artifact {sha256}: stored content hashes to {digest.hexdigest()}"
                )

        with self._open_raw(sha256) as f:
            yield chunks(f)

    def verify(self, sha256: str) -> None:
        with self.open_verified(sha256) as chunks:
            for _ in chunks:
                pass


def hash_stream_to(stream: BinaryIO, sink: BinaryIO) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    while block := stream.read(CHUNK):
        digest.update(block)
        sink.write(block)
        size += len(block)
    return digest.hexdigest(), size
