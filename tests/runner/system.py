"""Builders for the runner's system tests (no tests here): settings for a
web app and a runner host sharing one database and artifact store, a real
``RunnerWorker`` serving in threads, checkpoint archives, and a campaign of
a demo reference against an uploaded checkpoint."""

from __future__ import annotations

import contextlib
import io
import secrets
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from proctor.core.artifacts import open_store
from proctor.core.db.engine import ProctorSession, make_engine, make_session_factory
from proctor.core.db.models import ObjectType, RunnerHost, RunnerServer, Submission
from proctor.core.settings import Settings, load_settings
from proctor.runner.worker import RunnerWorker, WorkerConfig
from proctor.scheduler import service
from proctor.scheduler.protocol import parse_protocol
from proctor.scheduler.service import Actor
from tests.web.submissions_support import ENCRYPTION_KEY


def system_settings(db_url: str, data_dir: Path, **runner: Any) -> Settings:
    """One settings object for the web app, the conformance worker and the
    runner host: the same database, data folder and artifact store; small
    clocks so a test sees a stale host within seconds."""
    return load_settings(
        env="test",
        data_dir=data_dir,
        database_url=db_url,
        secret_key="test-secret-key-" + "x" * 32,
        encryption_key=ENCRYPTION_KEY,
        submissions={
            "max_upload_bytes": 64 * 2**20,
            "max_unpacked_bytes": 256 * 2**20,
            "conformance_dispatch": "worker",
            "allow_private_endpoints": True,
        },
        runner={
            "heartbeat_s": 0.5,
            "stale_after_s": 5.0,
            "ready_timeout_s": 300.0,
            "port_range": (19200, 19999),
            **runner,
        },
    )


def tar_folder(files: dict[str, bytes | Path]) -> bytes:
    """A tar.gz of ``{archive name: bytes or a host file}``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, payload in sorted(files.items()):
            data = payload.read_bytes() if isinstance(payload, Path) else payload
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def folder_files(root: Path, prefix: str) -> dict[str, bytes | Path]:
    return {f"{prefix}/{p.relative_to(root)}": p for p in root.rglob("*") if p.is_file()}


class WorkerThread:
    """A real runner host (``RunnerWorker``) serving in this process's threads."""

    def __init__(self, settings: Settings, *, host: str = "inference-test") -> None:
        self.engine = make_engine(str(settings.database_url))
        sessions = make_session_factory(self.engine)
        self.worker = RunnerWorker(
            sessions,
            open_store(settings.artifacts_location),
            WorkerConfig.from_settings(settings, host=host),
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self.worker.run, args=(self.stop,), name="runner-worker", daemon=True
        )

    def __enter__(self) -> WorkerThread:
        self.thread.start()
        # a check fails at once while no host is alive: let its first beat land
        sessions = make_session_factory(self.engine)

        def beat() -> bool:
            with sessions() as s:
                return s.get(RunnerHost, self.worker.config.host) is not None

        wait_for("the runner host's first heartbeat", beat, timeout=30, every=0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        self.engine.dispose()
        assert not self.thread.is_alive(), "the runner worker did not stop"


def wait_for(what: str, done: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = done()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def runner_rows(session: ProctorSession, submission_id: int) -> list[RunnerServer]:
    return list(
        session.scalars(
            sa.select(RunnerServer)
            .where(RunnerServer.submission_id == submission_id)
            .order_by(RunnerServer.id)
        )
    )


def submission_of(session: ProctorSession, submission_id: int) -> Submission:
    sub = session.get(Submission, submission_id)
    assert sub is not None
    return sub


def start_campaign(
    session: ProctorSession,
    *,
    reference: str,
    policies: list[str],
    per_item_s: float = 4.0,
    episodes_per_cell: int = 1,
) -> int:
    """A running campaign on the simulated cell's spoons, one item per episode."""
    obj = "spoons"  # an object the simulated cell knows; shared with other tests
    if session.scalar(sa.select(ObjectType.id).where(ObjectType.name == obj)) is None:
        session.add(ObjectType(name=obj, prompt="put the spoons into the target bin"))
        session.flush()
    c = service.create_campaign(
        session,
        protocol=parse_protocol(
            {
                "name": f"runner-{secrets.token_hex(3)}",
                "items_per_episode": 1,
                "per_item_cap_s": per_item_s,
                "tau_s": per_item_s,
                "episodes_per_cell": episodes_per_cell,
                "reference": reference,
                "policies": policies,
                "objects": [obj],
                "spatial_configs": [{"tote": "left", "camera": "left"}],
            }
        ),
        actor=Actor(label="test"),
    )
    service.start_campaign(session, campaign=c.id, actor=Actor(label="test"))
    return c.id


@contextlib.contextmanager
def quiet_engine(url: str) -> Iterator[Any]:
    engine = make_engine(url)
    try:
        yield make_session_factory(engine)
    finally:
        engine.dispose()
