"""The conformance queue: the web app enqueues, a worker process runs.

The web server never runs a check itself (it would hold a request, and a
submitter's server on the other end of it, inside the web process). It
inserts a ``ConformanceRun`` row (``queued``) in the request's transaction.
Once that commits, with ``submissions.conformance_dispatch = "subprocess"``
(the default outside prod) it claims every run the caps leave room for and
spawns ``proctor submission work RUN_ID --handed TOKEN`` for each, as a
detached subprocess; with ``"worker"`` (the default in prod) it leaves them
to a separately run ``proctor submission worker``.

The caps bound what runs at once, whoever runs it: ``claim`` takes a queued
run only while fewer than ``max_concurrent_checks`` run in all and fewer
than ``max_concurrent_checks_per_submitter`` of its owner's; the rest stay
queued, oldest first, and a worker that ends a check takes the next (it
drains the queue before it exits). Claims are serialized in the database
(an advisory lock on PostgreSQL, the write lock on SQLite), so the caps hold
over any number of web and worker processes. A run that stays ``running``
past ``STALE_AFTER`` (its worker died) is queued again.

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
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Session, aliased, sessionmaker

from proctor.core.db.engine import ProctorSession, session_scope
from proctor.core.db.models import ConformanceRun, Policy, Submission
from proctor.core.db.types import utcnow
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


@dataclass(frozen=True)
class Caps:
    """How many checks may run at once: in all, and of one submitter's (the
    owner of the checked policy). Beyond them a run waits ``queued``."""

    total: int = 2
    per_submitter: int = 1

    @classmethod
    def of(cls, settings: Settings) -> Caps:
        sub = settings.submissions
        return cls(
            total=sub.max_concurrent_checks, per_submitter=sub.max_concurrent_checks_per_submitter
        )


# claims of every process take this PostgreSQL advisory lock for their short
# transaction: the caps are counts over rows no claimer updates, which row
# locks (FOR UPDATE SKIP LOCKED) cannot serialize. SQLite's database-wide
# write lock does it there: the claim is one UPDATE statement.
_CLAIM_LOCK = int.from_bytes(b"pr-checks", "big") & (2**63 - 1)


def claim(
    session: ProctorSession,
    *,
    now: datetime,
    run_id: int | None = None,
    caps: Caps | None = None,
    worker: str | None = None,
) -> int | None:
    """Take a queued run (this one, or the oldest) if the caps leave room for
    it: its id, or None when there is none, none fits, or another worker took
    it first. ``worker`` names the claimer (default: this process). Commit
    right after: the claim holds the claim lock until then."""
    caps = caps or Caps()
    if session.get_bind().dialect.name == "postgresql":
        session.execute(sa.select(sa.func.pg_advisory_xact_lock(_CLAIM_LOCK)))
    run, sub, policy = ConformanceRun, Submission, Policy
    other, other_sub, other_policy = aliased(run), aliased(sub), aliased(policy)
    running = ConformanceRunStatus.running
    total = (
        sa.select(sa.func.count())
        .select_from(other)
        .where(other.status == running)
        .scalar_subquery()
    )
    owners = (
        sa.select(sa.func.count())
        .select_from(other)
        .join(other_sub, other_sub.id == other.submission_id)
        .join(other_policy, other_policy.id == other_sub.policy_id)
        .where(other.status == running, other_policy.owner_id == policy.owner_id)
        .correlate(policy)
        .scalar_subquery()
    )
    pick = (
        sa.select(run.id)
        .join(sub, sub.id == run.submission_id)
        .join(policy, policy.id == sub.policy_id)
        .where(run.status == ConformanceRunStatus.queued, total < caps.total)
        .where(sa.or_(policy.owner_id.is_(None), owners < caps.per_submitter))
        .order_by(run.id)
        .limit(1)
    )
    if run_id is not None:
        pick = pick.where(run.id == run_id)
    claimed = session.execute(
        sa.update(ConformanceRun)
        .where(
            ConformanceRun.id == pick.scalar_subquery(),
            ConformanceRun.status == ConformanceRunStatus.queued,
        )
        .values(status=running, started_at=now, worker=worker or worker_name())
        .returning(ConformanceRun.id)
    ).scalar_one_or_none()
    return claimed


def adopt(session: ProctorSession, run_id: int, *, token: str) -> bool:
    """Take over a run the web app claimed for this process (``dispatch``):
    it becomes this process's, named by it. False when it is no longer the
    one handed over (re-queued as stale meanwhile, or a wrong token)."""
    result = session.execute(
        sa.update(ConformanceRun)
        .where(
            ConformanceRun.id == run_id,
            ConformanceRun.status == ConformanceRunStatus.running,
            ConformanceRun.worker == _handed(token),
        )
        .values(worker=worker_name())
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def _handed(token: str) -> str:
    return f"handed:{token}"[:128]


def release(session: ProctorSession, run_id: int, *, token: str) -> None:
    """Queue again a run claimed for a process that could not be started."""
    session.execute(
        sa.update(ConformanceRun)
        .where(ConformanceRun.id == run_id, ConformanceRun.worker == _handed(token))
        .values(status=ConformanceRunStatus.queued, started_at=None, worker=None)
    )


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


def requeue_stale_of(session: ProctorSession, settings: Settings, *, now: datetime) -> int:
    """``requeue_stale`` with the wait a checkpoint's check may spend on its runner server."""
    runner = settings.runner
    wait = timedelta(seconds=runner.build_timeout_s + runner.ready_timeout_s)
    return requeue_stale(session, now=now, checkpoint_wait=wait)


# -- starting a worker once the request commits -----------------------------------
def dispatch_after_commit(session: ProctorSession, *, settings: Settings, run_id: int) -> None:
    """Start the checks the caps leave room for (``run_id`` among the queued)
    when ``session`` commits (nothing if it rolls back): subprocesses, or
    nothing for a separately run worker."""
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
    # the runs the caps leave room for start now, oldest first (not necessarily
    # this request's); the rest wait queued for a worker that ends a check
    workers_of(session).dispatch(pending[max(pending)])


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


def spawn_worker(settings: Settings, run_id: int, token: str) -> subprocess.Popen[bytes]:
    """``proctor submission work RUN_ID --handed TOKEN`` (the run claimed for
    it under ``TOKEN``) in its own session: it outlives a restarting web
    server. The caller waits for it (or ``ConformanceWorkers`` reaps it), so
    that no zombie is left."""
    log_dir = Path(settings.data_dir) / "logs"
    log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # the log holds submitters' endpoint URLs and error replies: owner only
    log_fd = os.open(log_dir / "conformance.log", os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
    with os.fdopen(log_fd, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "proctor",
                "submission",
                "work",
                str(run_id),
                "--handed",
                token,
            ],
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
    running (tests wait on them).

    A process is started only for a run claimed for it here, within the caps
    (``dispatch``), so an app never has more of them than checks may run at
    once; a process drains the queue (within the caps) before it ends, so a
    run left queued for want of room is taken when a check ends."""

    def __init__(self, sessions: sessionmaker[ProctorSession] | None = None) -> None:
        self._sessions = sessions
        self._children: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def dispatch(self, settings: Settings) -> list[subprocess.Popen[bytes]]:
        """Claim every run the caps leave room for now, each for a worker
        process started here. A run whose process cannot start is queued again."""
        if self._sessions is None:
            raise RuntimeError("these conformance workers have no database to claim runs in")
        started: list[subprocess.Popen[bytes]] = []
        caps = Caps.of(settings)
        try:
            with session_scope(self._sessions) as session:
                # a run whose worker died is queued again first, as a worker does
                requeue_stale_of(session, settings, now=utcnow())
            while True:
                token = secrets.token_hex(12)
                with session_scope(self._sessions) as session:
                    run_id = claim(session, now=utcnow(), caps=caps, worker=_handed(token))
                if run_id is None:
                    return started
                try:
                    started.append(self.start(settings, run_id, token))
                except OSError:
                    log.exception("could not start the conformance worker for run %s", run_id)
                    with session_scope(self._sessions) as session:
                        release(session, run_id, token=token)
                    return started
        except Exception:
            # after the commit the request has succeeded: its run stays queued
            # for the next dispatch or `proctor submission worker`
            log.exception("could not dispatch conformance checks")
            return started

    def start(self, settings: Settings, run_id: int, token: str) -> subprocess.Popen[bytes]:
        proc = spawn_worker(settings, run_id, token)
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
