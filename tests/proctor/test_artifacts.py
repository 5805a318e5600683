"""The artifact store: round trips, verification on read, atomic writes."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from proctor.core.artifacts import LocalArtifactStore, open_store
from proctor.core.artifacts.base import ArtifactStore
from proctor.core.artifacts.fsspec_store import FsspecArtifactStore
from proctor.core.errors import IntegrityError, UsageError


@pytest.fixture(params=["local", "fsspec-file", "fsspec-memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "local":
        return LocalArtifactStore(tmp_path / "store")
    if request.param == "fsspec-file":
        return FsspecArtifactStore(f"file://{tmp_path / 'fs-store'}")
    import uuid

    return FsspecArtifactStore(f"memory://proctor-{uuid.uuid4().hex}")


def test_round_trip_is_content_addressed(store: ArtifactStore) -> None:
    data = os.urandom(3 * (1 << 20) + 17)  # spans several chunks
    obj = store.put_bytes(data)
    assert obj.sha256 == hashlib.sha256(data).hexdigest()
    assert obj.size_bytes == len(data)
    assert store.exists(obj.sha256)
    assert store.size(obj.sha256) == len(data)
    assert store.read_bytes(obj.sha256) == data
    with store.open_verified(obj.sha256) as chunks:
        assert b"".join(chunks) == data
    # the same content stored twice is one object
    assert store.put_stream(io.BytesIO(data)) == obj


def test_declared_sha256_mismatch_stores_nothing(store: ArtifactStore) -> None:
    data = b"checkpoint bytes"
    wrong = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(UsageError, match="sha256"):
        store.put_stream(io.BytesIO(data), expected_sha256=wrong)
    assert not store.exists(hashlib.sha256(data).hexdigest())
    assert not store.exists(wrong)


def test_malformed_sha256_is_a_usage_error(store: ArtifactStore) -> None:
    with pytest.raises(UsageError, match="64 lowercase hex"):
        store.exists("../../etc/passwd")


def test_missing_object_is_reported(store: ArtifactStore) -> None:
    with pytest.raises(IntegrityError, match="not in the store"):
        store.read_bytes("0" * 64)


def test_corruption_is_detected_on_read(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    obj = store.put_bytes(b"telemetry segment " * 1000)
    path = store.local_path(obj.sha256)
    assert path is not None
    path.chmod(0o644)
    with path.open("r+b") as f:
        f.seek(100)
        f.write(b"X")
    with pytest.raises(IntegrityError, match="hashes to"):
        store.read_bytes(obj.sha256)
    with pytest.raises(IntegrityError, match="hashes to"):
        store.verify(obj.sha256)


def test_crash_mid_write_leaves_no_partial_object(tmp_path: Path) -> None:
    """A writer killed with SIGKILL half-way through leaves no object under
    any key; only a temp file, which the store cleans up."""
    root = tmp_path / "store"
    ready = tmp_path / "ready"
    writer = textwrap.dedent(
        f"""
        import pathlib, time
        from proctor.core.artifacts import LocalArtifactStore

        class Slow:
            def __init__(self):
                self.sent = 0
            def read(self, n):
                if self.sent >= 50:
                    time.sleep(60)
                self.sent += 1
                if self.sent == 10:
                    pathlib.Path({str(ready)!r}).write_text("x")
                return b"a" * 65536

        LocalArtifactStore(pathlib.Path({str(root)!r})).put_stream(Slow())
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", writer])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, "writer exited early"
            assert time.monotonic() < deadline, "writer never started writing"
            time.sleep(0.05)
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)

    store = LocalArtifactStore(root)
    objects = [p for p in (root / "objects").rglob("*") if p.is_file()]
    assert objects == []
    assert store.clean_temporary() == 1
    assert list((root / "tmp").iterdir()) == []


def test_open_store_picks_implementation(tmp_path: Path) -> None:
    assert isinstance(open_store(str(tmp_path / "a")), LocalArtifactStore)
    assert isinstance(open_store(f"file://{tmp_path / 'b'}"), LocalArtifactStore)
    assert isinstance(open_store("memory://x"), FsspecArtifactStore)


def test_s3_compatible_store_over_real_http(tmp_path: Path) -> None:
    """The fsspec store against an S3 API served on loopback (moto's server
    speaks the S3 wire protocol; no cloud is reachable here)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        import boto3

        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        ).create_bucket(Bucket="proctor")
        store = FsspecArtifactStore(
            "s3://proctor/artifacts",
            key="test",
            secret="test",
            client_kwargs={"endpoint_url": endpoint, "region_name": "us-east-1"},
        )
        data = os.urandom(2 * (1 << 20))
        obj = store.put_bytes(data)
        assert obj.uri == f"s3://proctor/artifacts/objects/{obj.sha256[:2]}/{obj.sha256}"
        assert store.read_bytes(obj.sha256) == data
        # the temporary upload key is gone
        tmp_keys = store.fs.find("proctor/core/artifacts/tmp")
        assert tmp_keys == []
    finally:
        server.stop()
