"""The demo's uploaded checkpoint, end to end as a submitter's goes.

One arm (``proctor.demo.checkpoint.CHECKPOINT_ARM``) is not served by the
demo: its owner packs it as a checkpoint archive and uploads it through the
web app's upload protocol over HTTP with an API token, as any lab would.
Completing the upload queues its conformance check (the web app starts the
worker process); the check asks for a runner server; the runner host — a
``RunnerWorker`` in this process, serving in its own threads — builds the
environment from the archive's pinned requirements, starts the server in its
bubblewrap sandbox and reports it ready; the check runs against it. The
campaign then includes it like every other arm: the station reaches it only
through the blinded gateway.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import sqlalchemy as sa
from rich.console import Console
from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import ArtifactStore
from proctor.core.audit import Actor
from proctor.core.db.engine import ProctorSession, session_scope
from proctor.core.db.models import RunnerServer, Submission, User
from proctor.core.db.types import utcnow
from proctor.core.domain import ConformanceStatus, Role
from proctor.core.errors import ProctorError
from proctor.core.settings import Settings
from proctor.demo import world
from proctor.demo.checkpoint import CHECKPOINT_ARM, build_archive
from proctor.runner.worker import RunnerWorker

# the first run on a machine builds the arm's environment from PyPI (about
# half a minute); later runs reuse it from the host-wide cache
CHECK_TIMEOUT_S = 900.0


@dataclass
class RunnerHost:
    """The runner worker serving in background threads until ``stop``."""

    worker: RunnerWorker
    stop_event: threading.Event
    thread: threading.Thread

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(60)


def start_runner_host(
    settings: Settings, sessions: sessionmaker[ProctorSession], store: ArtifactStore
) -> RunnerHost:
    from proctor.runner.worker import WorkerConfig

    worker = RunnerWorker(sessions, store, WorkerConfig.from_settings(settings, host="demo-runner"))
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), name="runner-host", daemon=True)
    thread.start()
    return RunnerHost(worker, stop, thread)


def _token(sessions: sessionmaker[ProctorSession], submitter: str) -> str:
    from proctor.web.accounts.service import create_token

    with session_scope(sessions) as s:
        user = s.scalar(sa.select(User).where(User.username == submitter))
        if user is None:
            raise ProctorError(f"the demo's submitter '{submitter}' is missing")
        _, plaintext = create_token(
            session=s,
            user=user,
            name="proctor demo upload",
            scopes=[Role.submitter.value],
            expires_in_days=1,
            allowed_roles=[Role.submitter],
            actor=Actor(label="proctor demo"),
            now=utcnow(),
        )
    return plaintext


def _upload(origin: str, token: str, archive: Path) -> int:
    data = archive.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=origin, headers=headers, timeout=120) as http:
        created = http.post(
            "/api/uploads",
            json={"filename": archive.name, "size_bytes": len(data), "sha256": digest},
        )
        created.raise_for_status()
        upload = created.json()["id"]
        sent = http.put(
            f"/api/uploads/{upload}",
            params={"offset": 0},
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        sent.raise_for_status()
        done = http.post(f"/api/uploads/{upload}/complete", json={"sha256": digest})
        if done.status_code != 201:
            raise ProctorError(f"the demo checkpoint's upload was refused: {done.text}")
        return int(done.json()["id"])


def upload_checkpoint_arm(
    settings: Settings,
    sessions: sessionmaker[ProctorSession],
    *,
    origin: str,
    submitter: str,
    seed: int,
    console: Console,
) -> int:
    """Upload the arm's archive and wait for its conformance check, showing
    the runner's stage; returns the submission's id."""
    name = world.POLICY_NAMES[CHECKPOINT_ARM]
    archive = build_archive(Path(settings.data_dir) / "demo" / f"{name}.tgz", seed=seed, name=name)
    sid = _upload(origin, _token(sessions, submitter), archive)
    deadline = time.monotonic() + CHECK_TIMEOUT_S
    with console.status(f"checkpoint '{name}': uploaded, waiting for its check") as status:
        while time.monotonic() < deadline:
            verdict, stage = _state(sessions, sid)
            if verdict != ConformanceStatus.pending:
                break
            status.update(f"checkpoint '{name}' (submission {sid}): runner {stage}")
            time.sleep(0.5)
    if verdict != ConformanceStatus.passed:
        raise ProctorError(
            f"the demo's uploaded checkpoint '{name}' did not pass its check ({verdict}); "
            f"see the runner's stage and diagnostics: proctor serve, /admin/runners"
        )
    console.print(f"checkpoint '{name}': uploaded, built, sandboxed, checked (submission {sid})")
    return sid


def _state(sessions: sessionmaker[ProctorSession], sid: int) -> tuple[ConformanceStatus, str]:
    with session_scope(sessions) as s:
        sub = s.get(Submission, sid)
        assert sub is not None
        row = s.scalar(
            sa.select(RunnerServer)
            .where(RunnerServer.submission_id == sid)
            .order_by(RunnerServer.id.desc())
            .limit(1)
        )
        stage = f"{row.status.value}: {row.stage}" if row is not None else "not requested yet"
        return sub.conformance_status, stage
