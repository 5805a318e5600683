"""An S3-compatible server on loopback in a process of its own (moto's
server mode): the store the tests talk to over real HTTP, the way a station
host and the server talk to a real bucket."""

from __future__ import annotations

import hashlib
import hmac
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qsl, quote, urlsplit

import httpx

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def moto_s3(bucket: str = "proctor") -> Iterator[str]:
    """Start moto on a free loopback port, create ``bucket``; yields the endpoint."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{endpoint}/moto-api/", timeout=2)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.1)
        import boto3

        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        ).create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def presigned_for_host(url: str, host: str, secret: str = "test") -> bool:
    """Whether ``url``'s SigV4 query signature is the one a store at ``host``
    (``name:port``) computes for a ``PUT`` of it: the check S3 makes, written
    out here from the SigV4 specification (moto's server checks no
    signatures). The URL must sign the Host header and nothing else, with an
    unsigned payload, as presigned part URLs do."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = dict(query)
    if given.get("X-Amz-SignedHeaders") != "host":
        return False

    def encode(text: str) -> str:
        return quote(text, safe="-_.~")

    canonical = "\n".join(
        [
            "PUT",
            parts.path,  # botocore sends it encoded already (S3 encodes once)
            "&".join(
                f"{encode(k)}={encode(v)}" for k, v in sorted(query) if k != "X-Amz-Signature"
            ),
            f"host:{host}\n",
            "host",
            "UNSIGNED-PAYLOAD",
        ]
    )
    scope = given["X-Amz-Credential"].split("/", 1)[1]  # date/region/s3/aws4_request
    to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            given["X-Amz-Date"],
            scope,
            hashlib.sha256(canonical.encode()).hexdigest(),
        ]
    )
    key = f"AWS4{secret}".encode()
    for step in scope.split("/"):
        key = hmac.new(key, step.encode(), hashlib.sha256).digest()
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, given.get("X-Amz-Signature", ""))
