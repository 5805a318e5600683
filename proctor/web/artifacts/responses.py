"""Sending an artifact's bytes: Range requests (video seeking), ETag
revalidation, and a filename that names only the episode and the kind."""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi import Request, status
from fastapi.responses import FileResponse, Response, StreamingResponse

from proctor.core.artifacts import ArtifactStore
from proctor.core.errors import IntegrityError
from proctor.web.artifacts.access import cache_control
from proctor.web.artifacts.service import VisibleArtifact


def _etag(sha256: str) -> str:
    return f'"{sha256}"'


def _matches(request: Request, etag: str) -> bool:
    header = request.headers.get("if-none-match")
    if not header:
        return False
    tags = {t.strip().removeprefix("W/") for t in header.split(",")}
    return etag in tags or "*" in tags


def _headers(found: VisibleArtifact, etag: str, *, download: bool) -> dict[str, str]:
    return {
        "etag": etag,
        "cache-control": cache_control(found.access),
        "vary": "cookie, authorization",
        "content-disposition": (
            f'{"attachment" if download else "inline"}; filename="{found.filename()}"'
        ),
    }


def serve_copy(
    request: Request, found: VisibleArtifact, body: bytes, *, download: bool
) -> Response:
    """``body`` in place of the artifact's stored bytes (a redacted copy:
    ``proctor.web.artifacts.redaction``), whole, with no ranges; its ETag is its own
    content's hash, never the stored object's."""
    etag = _etag(hashlib.sha256(body).hexdigest())
    headers = _headers(found, etag, download=download)
    headers["accept-ranges"] = "none"
    if _matches(request, etag):
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
    media_type = found.row.media_type or "application/octet-stream"
    if request.method == "HEAD":
        headers["content-length"] = str(len(body))
        return Response(status_code=200, media_type=media_type, headers=headers)
    return Response(body, media_type=media_type, headers=headers)


def serve_artifact(
    request: Request, store: ArtifactStore, found: VisibleArtifact, *, download: bool
) -> Response:
    sha256 = found.row.sha256
    etag = _etag(sha256)
    headers = _headers(found, etag, download=download)
    if _matches(request, etag):
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
    media_type = found.row.media_type or "application/octet-stream"
    path = store.local_path(sha256)
    if path is not None:
        if not path.is_file():
            raise IntegrityError(f"artifact {sha256}: registered but not in the store")
        return FileResponse(path, media_type=media_type, headers=headers)
    # a store without local files (S3): the whole object, verified as it streams
    headers["accept-ranges"] = "none"

    def body() -> Any:
        with store.open_verified(sha256) as chunks:
            yield from chunks

    if request.method == "HEAD":
        headers["content-length"] = str(store.size(sha256))
        return Response(status_code=200, media_type=media_type, headers=headers)
    return StreamingResponse(body(), media_type=media_type, headers=headers)
