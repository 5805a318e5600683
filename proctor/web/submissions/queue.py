"""The conformance queue: the web app enqueues, a worker process runs.

The web server never runs a check itself (it would hold a request, and a
submitter's server on the other end of it, inside the web process). It
inserts a ``ConformanceRun`` row (``queued``) in the request's transaction
and, once that commits, either spawns ``proctor submission work RUN_ID``
as a detached subprocess (``submissions.conformance_dispatch =
"subprocess"``, the default) or leaves it for a separately run ``proctor
submission worker`` (``"worker"``). Workers claim runs atomically
(``queued → running``), so any number may run side by side; a run that
stays ``running`` past ``STALE_AFTER`` (its worker died) is queued again.

The processes an app spawned are its own (``ConformanceWorkers``,
``AppState.conformance_workers``; the app's session factory puts it in
every session's ``info``, where the after-commit hook finds it). They run
in sessions of their own and outlive the app on purpose: a check under way
finishes, and records its result, across a restart of the web server.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Session

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import ConformanceRun, Submission
from proctor.core.domain import ConformanceRunStatus, SubmissionKind
from proctor.core.settings import Settings

log = logging.getLogger(__name__)

STALE_AFTER = timedelta(minutes=20)
_PENDING_KEY = "proctor.conformance_runs"
# where a session of the app finds the app's ConformanceWorkers (proctor.web.app)
WORKERS_KEY = "proctor.conformance_workers"
_ROOT = Path(__file__).resolve().parents[2]


def enqueue(
    session: ProctorSession, *, submission: Submission, requested_by_id: int | None, now: datetime
) -> ConformanceRun:
    run = ConformanceRun(
        submission_id=submission.id,
        status=ConformanceRunStatus.queued,
        requested_by_id=requested_by_id,
        requested_at=now,
    )
    session.add(run)
    session.flush()
    return run


def active_run(session: ProctorSession, submission_id: int) -> ConformanceRun | None:
    return session.scalars(
        sa.select(ConformanceRun)
        .where(
            ConformanceRun.submission_id == submission_id,
            ConformanceRun.status.in_([ConformanceRunStatus.queued, ConformanceRunStatus.running]),
        )
        .order_by(ConformanceRun.id.desc())
        .limit(1)
    ).first()


def latest_run(session: ProctorSession, submission_id: int) -> ConformanceRun | None:
    return session.scalars(
        sa.select(ConformanceRun)
        .where(ConformanceRun.submission_id == submission_id)
        .order_by(ConformanceRun.id.desc())
        .limit(1)
    ).first()


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"[:128]


def claim(session: ProctorSession, *, now: datetime, run_id: int | None = None) -> int | None:
    """Take a queued run (this one, or the oldest): its id, or None when
    there is none (or another worker took it first). Commit right after."""
    pick = (
        sa.select(ConformanceRun.id)
        .where(ConformanceRun.status == ConformanceRunStatus.queued)
        .order_by(ConformanceRun.id)
        .limit(1)
    )
    if run_id is not None:
        pick = pick.where(ConformanceRun.id == run_id)
    if session.get_bind().dialect.name == "postgresql":
        pick = pick.with_for_update(skip_locked=True)
    claimed = session.execute(
        sa.update(ConformanceRun)
        .where(
            ConformanceRun.id == pick.scalar_subquery(),
            ConformanceRun.status == ConformanceRunStatus.queued,
        )
        .values(status=ConformanceRunStatus.running, started_at=now, worker=worker_name())
        .returning(ConformanceRun.id)
    ).scalar_one_or_none()
    return claimed


def requeue_stale(
    session: ProctorSession, *, now: datetime, checkpoint_wait: timedelta = timedelta(0)
) -> int:
    """Queue again the runs whose worker vanished mid-check (running longer
    than ``STALE_AFTER``; a checkpoint's run longer than that plus
    ``checkpoint_wait``, since it first waits for its runner server)."""
    checkpoints = sa.select(Submission.id).where(Submission.kind == SubmissionKind.checkpoint)
    stale = sa.or_(
        sa.and_(
            ConformanceRun.submission_id.not_in(checkpoints),
            ConformanceRun.started_at < now - STALE_AFTER,
        ),
        ConformanceRun.started_at < now - STALE_AFTER - checkpoint_wait,
    )
    result = session.execute(
        sa.update(ConformanceRun)
        .where(ConformanceRun.status == ConformanceRunStatus.running, stale)
        .values(status=ConformanceRunStatus.queued, started_at=None, worker=None)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


# -- starting a worker once the request commits -----------------------------------
def dispatch_after_commit(session: ProctorSession, *, settings: Settings, run_id: int) -> None:
    """Start the check of ``run_id`` when ``session`` commits (nothing if it
    rolls back): a subprocess, or nothing for a separately run worker."""
    if settings.submissions.conformance_dispatch != "subprocess":
        return
    workers_of(session)  # a session of no app fails here, not silently after the commit
    pending: dict[int, Settings] = session.info.setdefault(_PENDING_KEY, {})
    pending[run_id] = settings
    if not event.contains(session, "after_commit", _after_commit):
        event.listen(session, "after_commit", _after_commit)
        event.listen(session, "after_soft_rollback", _after_rollback)


def workers_of(session: Session) -> ConformanceWorkers:
    """The conformance worker processes of the app that opened ``session``."""
    workers = session.info.get(WORKERS_KEY)
    if not isinstance(workers, ConformanceWorkers):
        raise RuntimeError(
            "this session was not opened by the web app: it cannot start a conformance worker"
        )
    return workers


def _after_commit(session: Session) -> None:
    pending: dict[int, Settings] = session.info.pop(_PENDING_KEY, {})
    if not pending:
        return
    workers = workers_of(session)
    for run_id, settings in sorted(pending.items()):
        try:
            workers.start(settings, run_id)
        except OSError:
            # the run stays queued: the next worker (or `proctor submission worker`) takes it
            log.exception("could not start the conformance worker for run %s", run_id)


def _after_rollback(session: Session, previous_transaction: Any) -> None:
    # after_soft_rollback passes the transaction that rolled back; a savepoint's
    # rollback leaves the outer transaction (and what it registered) alive
    if getattr(previous_transaction, "nested", False):
        return
    session.info.pop(_PENDING_KEY, None)


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment a worker needs to reach this server's database and
    read endpoint keys (secrets pass through the environment only). Not the
    server's session key: a worker signs no cookie, and a key it never holds
    cannot leak from it. (Settings demand a key in prod from every process,
    so a prod worker gets a random one of its own.) No other ``PROCTOR_*``
    variable of the server is passed on: the worker's settings are these."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env["PROCTOR_ENV"] = settings.env
    env["PROCTOR_DATA_DIR"] = str(settings.data_dir)
    env["PROCTOR_DATABASE_URL"] = settings.db_url
    env["PROCTOR_ARTIFACTS"] = settings.artifacts_location
    env["PROCTOR_SUBMISSIONS"] = settings.submissions.model_dump_json()
    # how long a checkpoint's check waits for its runner server
    env["PROCTOR_RUNNER"] = settings.runner.model_dump_json()
    if settings.encryption_key is not None:
        env["PROCTOR_ENCRYPTION_KEY"] = settings.encryption_key.get_secret_value()
    if settings.env == "prod":
        env["PROCTOR_SECRET_KEY"] = secrets.token_urlsafe(48)
    env.setdefault("PYTHONPATH", str(_ROOT))
    return env


def spawn_worker(settings: Settings, run_id: int) -> subprocess.Popen[bytes]:
    """``proctor submission work RUN_ID`` in its own session (it outlives a
    restarting web server). The caller waits for it (or ``ConformanceWorkers``
    reaps it), so that no zombie is left."""
    log_dir = Path(settings.data_dir) / "logs"
    log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # the log holds submitters' endpoint URLs and error replies: owner only
    log_fd = os.open(log_dir / "conformance.log", os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
    with os.fdopen(log_fd, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "proctor", "submission", "work", str(run_id)],
            env=worker_env(settings),
            cwd=_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


class ConformanceWorkers:
    """The conformance worker processes one app started: each is reaped by a
    thread of its own when it ends, and ``running()`` lists those still
    running (tests wait on them)."""

    def __init__(self) -> None:
        self._children: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def start(self, settings: Settings, run_id: int) -> subprocess.Popen[bytes]:
        proc = spawn_worker(settings, run_id)
        with self._lock:
            self._children.add(proc)

        def reap() -> None:
            proc.wait()
            with self._lock:
                self._children.discard(proc)

        threading.Thread(target=reap, name=f"conformance-reaper-{proc.pid}", daemon=True).start()
        return proc

    def running(self) -> list[subprocess.Popen[bytes]]:
        """Workers this app started that are still running."""
        with self._lock:
            return [p for p in self._children if p.poll() is None]
