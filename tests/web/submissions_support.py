"""Shared fixtures and builders for the submitter portal's tests (no tests
here): a ``portal`` web app with small upload limits, archives built in
memory, and the upload protocol driven end to end."""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import struct
import tarfile
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from proctor.core.db.models import (
    Artifact,
    AuditLog,
    ConformanceRun,
    Policy,
    Submission,
    UploadSession,
)
from proctor.core.domain import Role
from proctor.core.settings import Settings, load_settings
from proctor.scheduler.endpoint_keys import generate_encryption_key
from tests.web.conftest import Web, web_app

ENCRYPTION_KEY = generate_encryption_key()
MAX_UPLOAD = 2 * 2**20  # the limit the tests configure (the default is 50 GiB)
MAX_UNPACKED = 8 * 2**20
MAX_FILES = 40

MANIFEST = """\
name = "{name}"
description = "a test policy"

[runner]
framework = "lerobot"
policy_path = "checkpoint"

[policy]
action_space = "joint_velocity"
chunk_length = 10
control_hz = 15
image_size = [224, 224]
deterministic = true

[prompts]
default = "put the items into the target bin"
"""


def manifest(name: str = "acme-diffusion") -> bytes:
    return MANIFEST.format(name=name).encode()


def portal_settings(db_url: str, tmp: Path, **submissions: Any) -> Settings:
    return load_settings(
        env="test",
        data_dir=tmp,
        database_url=db_url,
        secret_key="test-secret-key-" + "x" * 32,
        encryption_key=ENCRYPTION_KEY,
        submissions={
            "max_upload_bytes": MAX_UPLOAD,
            "max_unpacked_bytes": MAX_UNPACKED,
            "max_files": MAX_FILES,
            "conformance_dispatch": "worker",
            **submissions,
        },
    )


def portal_app(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    """The web app with small upload limits, an encryption key, and checks
    left queued for a worker the test runs itself (on both databases). Test
    modules make it a fixture: ``yield from portal_app(web_db_url, tmp_path)``."""

    settings = portal_settings(web_db_url, tmp_path)
    yield from web_app(settings)


def live_token(server: Any, username: str) -> str:
    """A submitter API token for ``username`` on a live server (tests.browser.LiveServer)."""
    from proctor.web.accounts import service as accounts

    with server.db() as s:
        user = accounts.get_user_by_username(s, username)
        assert user is not None
        _, token = accounts.create_token(
            session=s,
            user=user,
            name="cli",
            scopes=("submitter",),
            expires_in_days=None,
            allowed_roles=list(Role),
            actor=accounts.Actor(label="test"),
            now=server.app.state.web.clock(),
        )
    return str(token)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def submitter(web: Web, name: str = "ada") -> dict[str, str]:
    web.add_user(name, Role.submitter)
    return bearer(web.token(name, ("submitter",)))


# -- archives ----------------------------------------------------------------------------
def register_and_check(portal: Web, body: dict[str, Any]) -> dict[str, Any]:
    """Register an endpoint as a submitter, run the queued conformance check
    in the worker, and return the submission as its owner sees it."""
    from proctor.web.submissions import worker

    h = submitter(portal)
    c = portal.client()
    r = c.post("/api/submissions/endpoints", json=body, headers=h)
    assert r.status_code == 201, r.text
    worker.work(portal.app.state.web.session_factory, portal.settings, clock=portal.clock)
    out: dict[str, Any] = c.get(f"/api/submissions/{r.json()['id']}", headers=h).json()
    return out


def tar_bytes(entries: list[tuple[str, str, Any]], mode: str = "w:gz") -> bytes:
    """``(name, kind, payload)``: kind ``file`` (bytes), ``dir``, ``symlink``
    (target), ``hardlink`` (target), ``chardev``, ``fifo``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:  # type: ignore[call-overload]
        for name, kind, payload in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "symlink": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "chardev": tarfile.CHRTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            if kind in ("symlink", "hardlink"):
                info.linkname = payload
            tar.addfile(info)
    return buf.getvalue()


def zip_bytes(
    entries: list[tuple[str, bytes]],
    *,
    symlinks: dict[str, str] | list[tuple[str, str]] | None = None,
) -> bytes:
    """Files, then links (``{name: target}``, or pairs in order: a list may
    name a path twice)."""
    buf = io.BytesIO()
    links = list(symlinks.items()) if isinstance(symlinks, dict) else list(symlinks or [])
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a duplicate name: some tests want one
        for name, data in entries:
            z.writestr(name, data)
        for name, target in links:
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = 0o120777 << 16
            z.writestr(info, target)
    return buf.getvalue()


def noise(n: int, seed: int = 0) -> bytes:
    """Incompressible bytes (stand-in model weights), the same every run."""
    return np.random.default_rng(seed).bytes(n)


def lerobot_config(
    inputs: dict[str, list[int]] | None = None, action: list[int] | None = None
) -> bytes:
    """A LeRobot config.json with the station's features (proctor/runner/README.md):
    state [8], both cameras, an action as wide as joint_velocity's."""
    features = inputs or {
        "observation.state": [8],
        "observation.images.exterior": [3, 96, 96],
        "observation.images.wrist": [3, 96, 96],
    }
    kinds = {"observation.state": "STATE"}
    return json.dumps(
        {
            "type": "diffusion",
            "input_features": {
                k: {"type": kinds.get(k, "VISUAL"), "shape": v} for k, v in features.items()
            },
            "output_features": {"action": {"type": "ACTION", "shape": action or [8]}},
        }
    ).encode()


def safetensors(weights: bytes) -> bytes:
    """A safetensors file of one uint8 tensor holding ``weights``."""
    header = json.dumps(
        {"w": {"dtype": "U8", "shape": [len(weights)], "data_offsets": [0, len(weights)]}}
    ).encode()
    return struct.pack("<Q", len(header)) + header + weights


def good_checkpoint(
    name: str = "acme-diffusion", weights: bytes | None = None, config: bytes | None = None
) -> bytes:
    weights = noise(8192) if weights is None else weights
    return tar_bytes(
        [
            ("policy.toml", "file", manifest(name)),
            ("checkpoint", "dir", None),
            ("checkpoint/config.json", "file", config or lerobot_config()),
            ("checkpoint/model.safetensors", "file", safetensors(weights)),
        ]
    )


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the protocol --------------------------------------------------------------------------
def begin(
    c: Any, headers: dict[str, str], data: bytes, filename: str = "ckpt.tar.gz", **kw: Any
) -> Any:
    body = {"filename": filename, "size_bytes": len(data), **kw}
    return c.post("/api/uploads", json=body, headers=headers)


def put(c: Any, headers: dict[str, str], upload_id: str, offset: int, data: bytes) -> Any:
    return c.put(
        f"/api/uploads/{upload_id}?offset={offset}",
        content=data,
        headers={**headers, "Content-Type": "application/octet-stream"},
    )


def upload(
    c: Any,
    headers: dict[str, str],
    data: bytes,
    *,
    chunk: int = 64 * 1024,
    declared: str | None = None,
    filename: str = "ckpt.tar.gz",
) -> Any:
    """Begin, send in chunks, complete; returns the completion's response."""
    r = begin(c, headers, data, filename=filename)
    assert r.status_code == 201, r.text
    uid = r.json()["id"]
    for offset in range(0, len(data), chunk):
        r = put(c, headers, uid, offset, data[offset : offset + chunk])
        assert r.status_code == 200, r.text
        assert r.json()["offset"] == min(len(data), offset + chunk)
    return c.post(
        f"/api/uploads/{uid}/complete", json={"sha256": declared or sha(data)}, headers=headers
    )


def leftovers(web: Web) -> dict[str, Any]:
    """Everything an upload could leave behind."""
    settings = web.settings
    uploads_dir = Path(settings.data_dir) / "uploads"
    store_root = Path(settings.artifacts_location)
    with web.db() as s:
        counts = {
            "upload_rows": s.scalar(sa.select(sa.func.count()).select_from(UploadSession)),
            "submissions": s.scalar(sa.select(sa.func.count()).select_from(Submission)),
            "artifacts": s.scalar(sa.select(sa.func.count()).select_from(Artifact)),
            "policies": s.scalar(sa.select(sa.func.count()).select_from(Policy)),
            "runs": s.scalar(sa.select(sa.func.count()).select_from(ConformanceRun)),
        }
    counts["staged_files"] = (
        sorted(p.name for p in uploads_dir.glob("*")) if uploads_dir.exists() else []
    )
    counts["stored_objects"] = sorted(
        p.name for p in (store_root / "objects").rglob("*") if p.is_file()
    )
    counts["store_tmp"] = sorted(p.name for p in (store_root / "tmp").glob("*"))
    return counts


NOTHING = {
    "upload_rows": 0,
    "submissions": 0,
    "artifacts": 0,
    "policies": 0,
    "runs": 0,
    "staged_files": [],
    "stored_objects": [],
    "store_tmp": [],
}


def audit_actions(web: Web) -> list[str]:
    with web.db() as s:
        return list(s.scalars(sa.select(AuditLog.action).order_by(AuditLog.id)))


def queued_check(
    web: Web, owner_id: int, url: str = "ws://127.0.0.1:9/", *, name: str | None = None
) -> int:
    """A registered endpoint of ``owner_id``'s with its check queued, written
    straight to the database (no request, no dispatch): the queued run's id."""
    from proctor.core.domain import ConformanceStatus, EndpointDialect, SubmissionKind
    from proctor.web.submissions import queue

    with web.db() as s:
        policy = Policy(name=name or f"p-{secrets.token_hex(4)}", owner_id=owner_id)
        s.add(policy)
        s.flush()
        sub = Submission(
            policy_id=policy.id,
            kind=SubmissionKind.endpoint,
            manifest={},
            endpoint_url=url,
            endpoint_dialect=EndpointDialect.openpi,
            conformance_status=ConformanceStatus.pending,
            conformance_report={},
            submitted_by_id=owner_id,
            created_at=web.clock(),
        )
        s.add(sub)
        s.flush()
        return queue.enqueue(s, submission=sub, requested_by_id=owner_id, now=web.clock()).id
