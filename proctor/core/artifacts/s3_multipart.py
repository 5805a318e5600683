"""Multipart uploads on an S3-compatible store: presigned ``UploadPart`` URLs.

The server's botocore client (credentials and endpoint as the store's own
fsspec filesystem has them: its storage options, else the environment's
``AWS_*`` variables) begins the upload at ``<root>/uploads/<key>``, signs one
URL per part, lists the parts for a resume and completes the upload. The
uploader sends each part with a plain ``PUT`` and needs no credentials.

The part URLs are signed by a second client, the same but for its endpoint:
the store's ``public_endpoint`` when it has one (the host name uploaders reach,
where the server's may be a name inside its own network). SigV4 signs the
Host, so the URL must be made for that host: one rewritten after signing is
refused by the store.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, BinaryIO, cast

import botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError

from proctor.core.artifacts.base import ArtifactStore, StoredObject
from proctor.core.artifacts.fsspec_store import FsspecArtifactStore
from proctor.core.artifacts.multipart import (
    MultipartBackend,
    MultipartUpload,
    Staged,
    check_key,
    check_parts,
    check_plan,
    part_length,
    same_etag,
)
from proctor.core.errors import FieldError, UsageError

# S3 copies an object in one call up to 5 GiB; a larger one is copied in
# ranges of this size (UploadPartCopy)
_COPY_LIMIT = 5 << 30
_COPY_PART = 1 << 30

_clients: weakref.WeakKeyDictionary[ArtifactStore, tuple[Any, Any]] = weakref.WeakKeyDictionary()
_clients_lock = threading.Lock()


def _clients_of(store: FsspecArtifactStore) -> tuple[Any, Any]:
    """The store's botocore clients, the server's and the URL signer's (one
    pair per store: they are thread-safe, and slow to make)."""
    with _clients_lock:
        pair = _clients.get(store)
        if pair is None:
            client = _make_client(store)
            signer = client if store.public_endpoint is None else _make_client(store, public=True)
            pair = _clients[store] = (client, signer)
        return pair


def _make_client(store: FsspecArtifactStore, *, public: bool = False) -> Any:
    options = dict(getattr(store.fs, "storage_options", {}))
    client_kwargs = dict(options.get("client_kwargs") or {})
    endpoint = client_kwargs.get("endpoint_url") or options.get("endpoint_url")
    # None lets botocore find each in the environment (AWS_ENDPOINT_URL, keys)
    return botocore.session.get_session().create_client(
        "s3",
        endpoint_url=store.public_endpoint if public else endpoint,
        region_name=client_kwargs.get("region_name"),
        aws_access_key_id=options.get("key"),
        aws_secret_access_key=options.get("secret"),
        aws_session_token=options.get("token"),
        # SigV4 everywhere: presigned URLs of the older scheme are refused by
        # newer regions and most S3-compatible servers
        config=Config(signature_version="s3v4", **dict(options.get("config_kwargs") or {})),
    )


def _missing(exc: ClientError) -> bool:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    return code in {"NoSuchUpload", "NoSuchKey", "404", "NotFound"}


class S3Multipart(MultipartBackend):
    def __init__(self, store: ArtifactStore) -> None:
        assert isinstance(store, FsspecArtifactStore)  # BACKENDS maps "s3" here
        self.store = store
        self.client, self._signer = _clients_of(store)
        self.bucket, _, self._prefix = store.root.partition("/")

    def _key(self, key: str) -> str:
        name = f"uploads/{check_key(key)}"
        return f"{self._prefix}/{name}" if self._prefix else name

    def _final_key(self, sha256: str) -> str:
        return self.store.key_for(sha256).partition("/")[2]

    def begin(self, key_hint: str, size: int, part_size: int) -> str:
        check_plan(size, part_size)
        made = self.client.create_multipart_upload(Bucket=self.bucket, Key=self._key(key_hint))
        return str(made["UploadId"])

    def part_targets(
        self, upload: MultipartUpload, numbers: Iterable[int], expires_s: int
    ) -> list[tuple[int, str | None]]:
        targets: list[tuple[int, str | None]] = []
        for n in numbers:
            part_length(upload, n)  # a number outside the upload is refused
            url = self._signer.generate_presigned_url(
                "upload_part",
                Params={
                    "Bucket": self.bucket,
                    "Key": self._key(upload.key),
                    "UploadId": upload.backend_id,
                    "PartNumber": n,
                },
                ExpiresIn=expires_s,
                HttpMethod="PUT",
            )
            targets.append((n, str(url)))
        return targets

    def _parts(self, upload: MultipartUpload) -> dict[int, tuple[str, int]]:
        found: dict[int, tuple[str, int]] = {}
        pages = self.client.get_paginator("list_parts").paginate(
            Bucket=self.bucket, Key=self._key(upload.key), UploadId=upload.backend_id
        )
        for page in pages:
            for part in page.get("Parts", []):
                found[int(part["PartNumber"])] = (str(part["ETag"]), int(part["Size"]))
        return found

    def received_parts(self, upload: MultipartUpload) -> dict[int, str]:
        try:
            parts = self._parts(upload)
        except ClientError as exc:
            if _missing(exc):
                return {}
            raise
        return {n: etag for n, (etag, _) in sorted(parts.items())}

    def _check_received(
        self, upload: MultipartUpload, parts: Sequence[tuple[int, str]]
    ) -> dict[int, tuple[str, int]]:
        held = self._parts(upload)
        for number, etag in parts:
            got = held.get(number)
            if got is None or not same_etag(got[0], etag):
                raise FieldError("parts", f"part {number} was not received with etag {etag}")
            if got[1] != part_length(upload, number):
                raise FieldError(
                    "parts", f"part {number} is {got[1]} bytes, not {part_length(upload, number)}"
                )
        return held

    def complete(self, upload: MultipartUpload, parts: Sequence[tuple[int, str]]) -> Staged:
        check_parts(upload, parts)
        try:
            held = self._check_received(upload, parts)
        except ClientError as exc:
            if _missing(exc) and self._exists(self._key(upload.key)):
                return Staged(upload.key)  # completed before: a replay
            raise
        self.client.complete_multipart_upload(
            Bucket=self.bucket,
            Key=self._key(upload.key),
            UploadId=upload.backend_id,
            # the ETags as the store wrote them (quoted), whatever the uploader kept
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": held[n][0]} for n, _ in parts]},
        )
        return Staged(upload.key)

    def abort(self, upload: MultipartUpload) -> None:
        try:
            self.client.abort_multipart_upload(
                Bucket=self.bucket, Key=self._key(upload.key), UploadId=upload.backend_id
            )
        except ClientError as exc:
            if not _missing(exc):
                raise
        self.client.delete_object(Bucket=self.bucket, Key=self._key(upload.key))

    def in_progress(self, upload: MultipartUpload) -> bool:
        try:
            self.client.list_parts(
                Bucket=self.bucket, Key=self._key(upload.key), UploadId=upload.backend_id
            )
        except ClientError as exc:
            if not _missing(exc):
                raise
            return self._exists(self._key(upload.key))
        return True

    def _exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _missing(exc):
                return False
            raise
        return True

    def _open_staged(self, staged: Staged) -> BinaryIO:
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self._key(staged.key))
        except ClientError as exc:
            if _missing(exc):
                raise UsageError(f"upload {staged.key}: nothing is staged") from None
            raise
        return cast(BinaryIO, got["Body"])

    def _discard(self, staged: Staged) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(staged.key))

    def _promote(self, staged: Staged, sha256: str, size: int) -> StoredObject:
        final = self._final_key(sha256)
        if not self._exists(final):
            self._copy(self._key(staged.key), final, size)
        self._discard(staged)
        # the store's fsspec filesystem may have listed the folder before
        self.store.fs.invalidate_cache()
        return StoredObject(sha256=sha256, size_bytes=size, uri=self.store.uri_for(sha256))

    def _copy(self, source: str, target: str, size: int) -> None:
        origin = {"Bucket": self.bucket, "Key": source}
        if size <= _COPY_LIMIT:
            self.client.copy_object(Bucket=self.bucket, Key=target, CopySource=origin)
            return
        made = self.client.create_multipart_upload(Bucket=self.bucket, Key=target)
        upload_id = made["UploadId"]
        try:
            parts = []
            for i, start in enumerate(range(0, size, _COPY_PART), start=1):
                end = min(start + _COPY_PART, size) - 1
                done = self.client.upload_part_copy(
                    Bucket=self.bucket,
                    Key=target,
                    UploadId=upload_id,
                    PartNumber=i,
                    CopySource=origin,
                    CopySourceRange=f"bytes={start}-{end}",
                )
                parts.append({"PartNumber": i, "ETag": done["CopyPartResult"]["ETag"]})
            self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=target,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            )
        except BaseException:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=target, UploadId=upload_id)
            raise
