"""Resumable multipart uploads into the artifact store.

A station host holds no store credentials. To send a large artifact it asks
the server for an upload; the server begins a multipart upload at a staging
name (``<root>/uploads/<id>``, never a content address) and hands out one
target per part. On an S3-compatible store each target is a presigned
``UploadPart`` URL, so the bytes go from the station straight to the store
and the server is not in the data path; on a local folder the parts come
through the server (``put_part``). Either way the store keeps each part it
received, so an interrupted upload resumes with the missing parts only
(``received_parts``).

``complete`` joins the parts into one staged object. ``finish`` then reads
it once, checks its size and sha256 against what the station declared, and
only then moves it to its content address: an object at ``objects/ab/<sha>``
is always the bytes that hash to its name. On a mismatch nothing is
addressed and the staged object is removed.

Each store kind (``ArtifactStore.kind``) has one backend in ``BACKENDS``;
``multipart_for(store)`` picks it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from proctor.core.artifacts.base import CHUNK, ArtifactStore, StoredObject, check_sha256
from proctor.core.errors import FieldError, UsageError

DEFAULT_PART_SIZE = 8 << 20
# S3's floor for every part but the last (MinIO's too): a production server on
# S3 hands out parts at least this long (proctor.core.settings refuses less)
S3_MIN_PART_SIZE = 5 << 20
# the floor this protocol takes: a local store, or an S3-compatible test server
# told to accept small parts (moto's S3_UPLOAD_PART_MIN_SIZE), so that a test
# can make a small recording travel in several parts
MIN_PART_SIZE = 64 << 10
# S3's ceiling for one part, and for the number of parts
MAX_PART_SIZE = 5 << 30
MAX_PARTS = 10000
_KEY = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


@dataclass(frozen=True)
class MultipartUpload:
    """One upload in progress: ``key`` names its staging place
    (``<root>/uploads/<key>``), ``backend_id`` is the store's own id for it
    (S3's ``UploadId``)."""

    key: str
    backend_id: str
    size: int
    part_size: int

    @property
    def part_count(self) -> int:
        return part_count(self.size, self.part_size)


@dataclass(frozen=True)
class Staged:
    """The parts joined into one object at the upload's staging name."""

    key: str


def part_count(size: int, part_size: int) -> int:
    """Parts an upload of ``size`` bytes has; an empty object is one empty part."""
    return max(1, -(-size // part_size))


def part_length(upload: MultipartUpload, number: int) -> int:
    """How long part ``number`` must be: ``part_size``, except the last."""
    count = upload.part_count
    if not 1 <= number <= count:
        raise FieldError("part", f"part {number} is not one of this upload's 1..{count}")
    if number < count:
        return upload.part_size
    return upload.size - (count - 1) * upload.part_size


def check_plan(size: int, part_size: int) -> None:
    """A size and part size the stores accept (S3's limits, kept everywhere)."""
    if size < 0:
        raise FieldError("size_bytes", "must be 0 or more")
    if not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
        raise FieldError("part_size", f"must be {MIN_PART_SIZE}..{MAX_PART_SIZE} bytes")
    if part_count(size, part_size) > MAX_PARTS:
        raise FieldError(
            "size_bytes", f"{size} bytes is more than {MAX_PARTS} parts of {part_size} bytes"
        )


def check_key(key: str) -> str:
    if not _KEY.match(key):
        raise UsageError(f"upload key '{key}' is not 8..64 letters, digits, '_' or '-'")
    return key


def check_parts(upload: MultipartUpload, parts: Sequence[tuple[int, str]]) -> None:
    """The parts a completion names are each part once, in order."""
    numbers = [n for n, _ in parts]
    if numbers != list(range(1, upload.part_count + 1)):
        raise FieldError(
            "parts", f"name every part 1..{upload.part_count} once, in order, with its etag"
        )


def same_etag(a: str, b: str) -> bool:
    # S3 quotes its ETags; a client may pass them on with or without
    return a.strip('"') == b.strip('"')


class MultipartBackend(ABC):
    """The multipart protocol of one store kind."""

    @abstractmethod
    def begin(self, key_hint: str, size: int, part_size: int) -> str:
        """Start an upload staged under ``key_hint``; returns the backend's id."""

    @abstractmethod
    def part_targets(
        self, upload: MultipartUpload, numbers: Iterable[int], expires_s: int
    ) -> list[tuple[int, str | None]]:
        """Where each part goes: a URL the uploader uses as is (presigned), or
        None for "through the server" (``put_part``)."""

    @abstractmethod
    def received_parts(self, upload: MultipartUpload) -> dict[int, str]:
        """The parts the store holds now, number to ETag."""

    def put_part(self, upload: MultipartUpload, number: int, stream: BinaryIO) -> str:
        """Store one part sent through the server; returns its ETag."""
        raise UsageError("this store takes parts directly from the uploader, not through us")

    @abstractmethod
    def complete(self, upload: MultipartUpload, parts: Sequence[tuple[int, str]]) -> Staged:
        """Join the parts (number, ETag), in order, into one staged object.
        Completing an upload already completed returns the same staged object."""

    @abstractmethod
    def abort(self, upload: MultipartUpload) -> None:
        """Drop the upload and everything staged for it (idempotent)."""

    @abstractmethod
    def in_progress(self, upload: MultipartUpload) -> bool:
        """Whether the store still has the upload or its staged object: False
        once ``finish`` moved it to its content address (or it was aborted)."""

    @abstractmethod
    def _open_staged(self, staged: Staged) -> BinaryIO: ...

    @abstractmethod
    def _discard(self, staged: Staged) -> None: ...

    @abstractmethod
    def _promote(self, staged: Staged, sha256: str, size: int) -> StoredObject:
        """Move a verified staged object to its content address."""

    def finish(self, staged: Staged, expected_sha256: str, expected_size: int) -> StoredObject:
        """Read the staged object once; if its size and sha256 are the declared
        ones move it to its content address, else remove it and raise a
        ``FieldError`` naming ``size_bytes`` or ``sha256``."""
        check_sha256(expected_sha256)
        digest = hashlib.sha256()
        size = 0
        with self._open_staged(staged) as f:
            while block := f.read(CHUNK):
                digest.update(block)
                size += len(block)
        if size != expected_size:
            self._discard(staged)
            raise FieldError(
                "size_bytes", f"the parts make {size} bytes, not the declared {expected_size}"
            )
        if digest.hexdigest() != expected_sha256:
            self._discard(staged)
            raise FieldError(
                "sha256", f"the parts hash to {digest.hexdigest()}, not the declared one"
            )
        return self._promote(staged, expected_sha256, size)


class LocalMultipart(MultipartBackend):
    """Parts through the server into ``<root>/uploads/<key>/<n>.part``, each
    written to a temporary name, fsynced and renamed, with its sha256 (the
    ETag) beside it in ``<n>.etag``; the staged object is ``<key>/object``."""

    def __init__(self, store: ArtifactStore) -> None:
        from proctor.core.artifacts.local import LocalArtifactStore

        assert isinstance(store, LocalArtifactStore)  # BACKENDS maps "local" here
        self.store = store
        self._uploads = store.root / "uploads"

    def _folder(self, key: str) -> Path:
        return self._uploads / check_key(key)

    def begin(self, key_hint: str, size: int, part_size: int) -> str:
        check_plan(size, part_size)
        self._folder(key_hint).mkdir(mode=0o700, parents=True, exist_ok=True)
        return key_hint

    def part_targets(
        self, upload: MultipartUpload, numbers: Iterable[int], expires_s: int
    ) -> list[tuple[int, str | None]]:
        return [(n, None) for n in numbers]

    def received_parts(self, upload: MultipartUpload) -> dict[int, str]:
        folder = self._folder(upload.key)
        found = {}
        for tag in folder.glob("*.etag"):
            number = int(tag.stem)
            if (folder / f"{number}.part").is_file():
                found[number] = tag.read_text().strip()
        return dict(sorted(found.items()))

    def put_part(self, upload: MultipartUpload, number: int, stream: BinaryIO) -> str:
        expected = part_length(upload, number)
        folder = self._folder(upload.key)
        if not folder.is_dir():
            raise UsageError(f"upload {upload.key}: not open")
        tmp = folder / f"{number}.{uuid.uuid4().hex}.tmp"
        try:
            etag, size = _write_bounded(stream, tmp, limit=expected)
            if size != expected:
                raise FieldError("part", f"part {number} must be {expected} bytes, not {size}")
            tmp.replace(folder / f"{number}.part")
            _write_atomic(folder / f"{number}.etag", etag)
            return etag
        finally:
            tmp.unlink(missing_ok=True)

    def complete(self, upload: MultipartUpload, parts: Sequence[tuple[int, str]]) -> Staged:
        folder = self._folder(upload.key)
        staged = folder / "object"
        if staged.is_file():
            return Staged(upload.key)
        check_parts(upload, parts)
        held = self.received_parts(upload)
        for number, etag in parts:
            if number not in held or not same_etag(held[number], etag):
                raise FieldError("parts", f"part {number} was not received with etag {etag}")
        tmp = folder / f"object.{uuid.uuid4().hex}.tmp"
        try:
            with tmp.open("wb") as out:
                for number, _ in parts:
                    with (folder / f"{number}.part").open("rb") as f:
                        shutil.copyfileobj(f, out, CHUNK)
                out.flush()
                os.fsync(out.fileno())
            tmp.replace(staged)
        finally:
            tmp.unlink(missing_ok=True)
        for number, _ in parts:  # the joined object holds them now
            (folder / f"{number}.part").unlink(missing_ok=True)
        return Staged(upload.key)

    def abort(self, upload: MultipartUpload) -> None:
        shutil.rmtree(self._folder(upload.key), ignore_errors=True)

    def in_progress(self, upload: MultipartUpload) -> bool:
        return self._folder(upload.key).is_dir()

    def _open_staged(self, staged: Staged) -> BinaryIO:
        try:
            return (self._folder(staged.key) / "object").open("rb")
        except FileNotFoundError:
            raise UsageError(f"upload {staged.key}: nothing is staged") from None

    def _discard(self, staged: Staged) -> None:
        shutil.rmtree(self._folder(staged.key), ignore_errors=True)

    def _promote(self, staged: Staged, sha256: str, size: int) -> StoredObject:
        final = self.store.local_path(sha256)
        assert final is not None  # a local store always has one
        final.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not final.exists():
            (self._folder(staged.key) / "object").replace(final)
        self._discard(staged)
        return StoredObject(sha256=sha256, size_bytes=size, uri=self.store.uri_for(sha256))


def _write_bounded(stream: BinaryIO, path: Path, *, limit: int) -> tuple[str, int]:
    """Write at most ``limit + 1`` bytes of ``stream`` (one more tells a part
    too long from one just right), fsynced; returns (sha256, size)."""
    digest = hashlib.sha256()
    size = 0
    with os.fdopen(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600), "wb") as f:
        while size <= limit and (block := stream.read(min(CHUNK, limit + 1 - size))):
            digest.update(block)
            f.write(block)
            size += len(block)
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest(), size


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _s3(store: ArtifactStore) -> MultipartBackend:
    # botocore comes with s3fs (the ``s3`` extra): import it only when used
    from proctor.core.artifacts.s3_multipart import S3Multipart

    return S3Multipart(store)


BACKENDS: dict[str, Callable[[ArtifactStore], MultipartBackend]] = {
    "local": LocalMultipart,
    "s3": _s3,
}


def multipart_for(store: ArtifactStore) -> MultipartBackend:
    """The multipart backend of ``store``'s kind."""
    make = BACKENDS.get(store.kind)
    if make is None:
        raise UsageError(
            f"artifacts: a '{store.kind}' store takes no multipart uploads "
            f"(these do: {', '.join(sorted(BACKENDS))})"
        )
    return make(store)
