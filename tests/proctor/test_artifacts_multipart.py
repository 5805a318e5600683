"""The multipart protocol (``proctor.core.artifacts.multipart``) against a
local folder and against an S3-compatible server in a process of its own
(moto's server mode on loopback): parts sent with plain HTTP PUTs to
presigned URLs by a client that holds no credentials, a resume that sends
only the missing parts, and a declared size or sha256 that the parts do not
match leaving nothing at any content address."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from proctor.core.artifacts import LocalArtifactStore, open_store
from proctor.core.artifacts.base import ArtifactStore
from proctor.core.artifacts.fsspec_store import FsspecArtifactStore
from proctor.core.artifacts.multipart import (
    MIN_PART_SIZE,
    S3_MIN_PART_SIZE,
    MultipartBackend,
    MultipartUpload,
    multipart_for,
)
from proctor.core.errors import FieldError, UsageError
from tests.moto_s3 import moto_s3, presigned_for_host

PART = S3_MIN_PART_SIZE
DATA = os.urandom(2 * PART + 12345)  # three parts, the last one short
SHA = hashlib.sha256(DATA).hexdigest()
CREDENTIAL_VARIABLES = {
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_s3() as endpoint:
        yield endpoint


def s3_store(endpoint: str, prefix: str, **kw: Any) -> FsspecArtifactStore:
    return FsspecArtifactStore(
        f"s3://proctor/{prefix}",
        **kw,
        key="test",
        secret="test",
        client_kwargs={"endpoint_url": endpoint, "region_name": "us-east-1"},
    )


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "local":
        return LocalArtifactStore(tmp_path / "artifacts")
    endpoint = request.getfixturevalue("s3_endpoint")
    return s3_store(endpoint, f"t{os.urandom(4).hex()}")


def part_bytes(n: int) -> bytes:
    return DATA[(n - 1) * PART : n * PART]


def send(backend: MultipartBackend, upload: MultipartUpload, numbers: list[int]) -> None:
    """What a station does: through the server where the target has no URL,
    else a plain PUT to the presigned URL with no credentials of its own."""
    assert not CREDENTIAL_VARIABLES & set(os.environ), "the uploader holds no keys"
    for n, url in backend.part_targets(upload, numbers, 600):
        if url is None:
            backend.put_part(upload, n, io.BytesIO(part_bytes(n)))
            continue
        with httpx.Client(trust_env=False) as client:
            r = client.put(url, content=part_bytes(n))
        assert r.status_code == 200, r.text
        assert "authorization" not in {k.lower() for k in r.request.headers}


def begin(backend: MultipartBackend, key: str, data: bytes = DATA) -> MultipartUpload:
    backend_id = backend.begin(key, len(data), PART)
    return MultipartUpload(key=key, backend_id=backend_id, size=len(data), part_size=PART)


def test_an_interrupted_upload_resumes_with_the_missing_part(store: ArtifactStore) -> None:
    backend = multipart_for(store)
    upload = begin(backend, "upload-resume-1")
    assert backend.received_parts(upload) == {}
    send(backend, upload, [1, 3])  # the link dropped before part 2
    held = backend.received_parts(upload)
    assert sorted(held) == [1, 3]
    send(backend, upload, [n for n in (1, 2, 3) if n not in held])
    held = backend.received_parts(upload)
    assert sorted(held) == [1, 2, 3]
    assert not store.exists(SHA)
    assert backend.in_progress(upload)
    staged = backend.complete(upload, sorted(held.items()))
    assert backend.in_progress(upload)  # staged, not yet addressed
    stored = backend.finish(staged, SHA, len(DATA))
    assert not backend.in_progress(upload)
    assert stored.sha256 == SHA and stored.size_bytes == len(DATA)
    assert stored.uri == store.uri_for(SHA)
    assert store.read_bytes(SHA) == DATA


@pytest.mark.parametrize(
    ("sha", "size", "field"),
    [
        (hashlib.sha256(b"something else").hexdigest(), len(DATA), "sha256"),
        (SHA, len(DATA) + 1, "size_bytes"),
    ],
)
def test_parts_that_do_not_match_the_declaration_are_never_addressed(
    store: ArtifactStore, sha: str, size: int, field: str
) -> None:
    backend = multipart_for(store)
    upload = begin(backend, f"upload-bad-{field}")
    send(backend, upload, [1, 2, 3])
    staged = backend.complete(upload, sorted(backend.received_parts(upload).items()))
    with pytest.raises(FieldError) as refused:
        backend.finish(staged, sha, size)
    assert refused.value.field == field
    assert not store.exists(sha) and not store.exists(SHA)
    with pytest.raises(UsageError, match="nothing is staged"):  # the staged object is gone too
        backend.finish(staged, SHA, len(DATA))
    assert not store.exists(SHA)


def test_a_completion_must_name_every_part_with_the_etag_the_store_holds(
    store: ArtifactStore,
) -> None:
    backend = multipart_for(store)
    upload = begin(backend, "upload-etags-1")
    send(backend, upload, [1, 2, 3])
    held = sorted(backend.received_parts(upload).items())
    with pytest.raises(FieldError) as missing:
        backend.complete(upload, held[:2])
    assert missing.value.field == "parts"
    wrong = [(n, "0" * 32) if n == 2 else (n, e) for n, e in held]
    with pytest.raises(FieldError) as forged:
        backend.complete(upload, wrong)
    assert forged.value.field == "parts"
    backend.abort(upload)
    assert backend.received_parts(upload) == {}


def test_a_local_part_of_the_wrong_length_is_not_kept(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "artifacts")
    backend = multipart_for(store)
    upload = begin(backend, "upload-length")
    for body in (part_bytes(1) + b"x", part_bytes(1)[:-1]):
        with pytest.raises(FieldError) as refused:
            backend.put_part(upload, 1, io.BytesIO(body))
        assert refused.value.field == "part"
    with pytest.raises(FieldError):
        backend.put_part(upload, 4, io.BytesIO(b""))
    assert backend.received_parts(upload) == {}
    assert [p.name for p in (store.root / "uploads" / "upload-length").iterdir()] == []


def test_an_s3_part_of_the_wrong_length_is_refused_at_completion(s3_endpoint: str) -> None:
    store = s3_store(s3_endpoint, "short-part")
    backend = multipart_for(store)
    upload = begin(backend, "upload-s3-short")
    targets = dict(backend.part_targets(upload, [1, 2, 3], 600))
    for n in (1, 2, 3):
        body = part_bytes(n)[:-1] if n == 2 else part_bytes(n)
        assert httpx.put(str(targets[n]), content=body).status_code == 200
    with pytest.raises(FieldError) as refused:
        backend.complete(upload, sorted(backend.received_parts(upload).items()))
    assert refused.value.field == "parts"


def test_each_store_kind_has_its_backend_or_says_it_has_none(tmp_path: Path) -> None:
    assert type(multipart_for(open_store(str(tmp_path / "a")))).__name__ == "LocalMultipart"
    with pytest.raises(UsageError, match="'memory' store takes no multipart"):
        multipart_for(open_store("memory://x"))


def test_a_plan_is_within_the_stores_limits(tmp_path: Path) -> None:
    backend = multipart_for(LocalArtifactStore(tmp_path / "a"))
    with pytest.raises(FieldError) as small:
        backend.begin("upload-small", 10, MIN_PART_SIZE - 1)
    assert small.value.field == "part_size"
    with pytest.raises(FieldError) as many:
        backend.begin("upload-many", 10001 * PART, PART)
    assert many.value.field == "size_bytes"
    with pytest.raises(UsageError):
        backend.begin("../escape", 10, PART)


def test_send_parts_resumes_and_never_shows_the_store_a_token(
    s3_endpoint: str, tmp_path: Path
) -> None:
    """The station's helper: parts already in are not sent again (their ETags
    come from the plan), and a client that carries the station's bearer token
    by default does not hand it to the store's presigned URLs."""
    from proctor.core.station_api_wire import PartTarget, UploadPlan
    from proctor.station.uplink.upload import send_parts

    store = s3_store(s3_endpoint, "helper")
    backend = multipart_for(store)
    upload = begin(backend, "upload-helper")
    send(backend, upload, [1])
    [(_, etag1)] = backend.received_parts(upload).items()
    plan = UploadPlan(
        upload_id=upload.key,
        part_size=PART,
        parts=[
            PartTarget(number=n, url=str(url), auth="store")
            for n, url in backend.part_targets(upload, [2, 3], 600)
        ],
        received=[1],
        received_etags={1: etag1},
    )
    path = tmp_path / "artifact.bin"
    path.write_bytes(DATA)
    seen: list[httpx.Request] = []
    token = {"Authorization": "Bearer pst_not-for-the-store"}
    with httpx.Client(headers=token, event_hooks={"request": [seen.append]}) as client:
        parts = send_parts(client, plan, path, server_headers=token)
    assert [p.number for p in parts] == [1, 2, 3]
    assert [r.url.params["partNumber"] for r in seen] == ["2", "3"]
    assert not [r for r in seen if "authorization" in r.headers]
    staged = backend.complete(upload, [(p.number, p.etag) for p in parts])
    assert backend.finish(staged, SHA, len(DATA)).sha256 == SHA


def test_part_urls_are_signed_for_the_public_endpoint_uploaders_reach(s3_endpoint: str) -> None:
    """The server talks to the store at 127.0.0.1; uploaders are told to use
    ``localhost`` (the store's public name): the URLs name that host and are
    signed for it (SigV4 signs the Host: a URL rewritten after signing would
    be refused by a store that checks), and the upload through them completes
    and verifies. Without a public endpoint the URLs are the server's own."""
    public = s3_endpoint.replace("127.0.0.1", "localhost")
    assert public != s3_endpoint
    internal_host = urlsplit(s3_endpoint).netloc
    public_host = urlsplit(public).netloc

    plain = multipart_for(s3_store(s3_endpoint, "own-endpoint"))
    upload = begin(plain, "upload-own-endpoint")
    [(_, url)] = plain.part_targets(upload, [1], 600)
    assert url is not None and urlsplit(url).netloc == internal_host
    assert presigned_for_host(url, internal_host) and not presigned_for_host(url, public_host)
    plain.abort(upload)

    store = s3_store(s3_endpoint, "public-endpoint", public_endpoint=public)
    backend = multipart_for(store)
    upload = begin(backend, "upload-public-endpoint")
    targets = backend.part_targets(upload, [1, 2, 3], 600)
    for _, url in targets:
        assert url is not None and urlsplit(url).netloc == public_host
        assert presigned_for_host(url, public_host)
        assert not presigned_for_host(url, internal_host)
    send(backend, upload, [1, 2, 3])
    staged = backend.complete(upload, sorted(backend.received_parts(upload).items()))
    assert backend.finish(staged, SHA, len(DATA)).sha256 == SHA
    assert store.read_bytes(SHA) == DATA
