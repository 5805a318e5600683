"""Recomputing snapshots in the background, in-process (no broker).

One worker per app (``AppState.snapshot_worker``), working through the
app's session factory. ``request(campaign_id)`` queues a campaign
(a campaign already waiting is not queued twice: ten reviews in a row cost
one or two recomputations, not ten) and starts the worker's thread if it is
idle; the thread drains the queue and ends, so nothing lingers after the
last request. Each recomputation runs in its own transaction.

The review flow calls ``recompute_after_commit(session, campaign_id=…)``
inside its request: the campaign is queued only when that transaction
commits (a rolled-back review queues nothing, and the worker never reads
data that is not committed yet), on the worker of the app whose session it
is (the app's session factory puts its worker in every session's ``info``).
When the app shuts down its worker takes no more work (``close``): what was
queued is dropped, as a crash drops it. The queue lives in this process: a crash
loses it, so the server's start-up (``proctor.web.startup``) queues every campaign
whose latest snapshot no longer matches its data.

With several server processes (``proctor serve --workers N``) each has its
own worker, and all of them queue the same stale campaigns at start-up. A
recomputation therefore holds a lock on its campaign across processes
(``pg_advisory_xact_lock`` on PostgreSQL; an exclusive ``flock`` on a file
beside the SQLite database) from before it reads the data until its
snapshots are committed: the second process to come waits, then finds the
latest snapshot matching the data and adds nothing, and a recomputation
that read older data can never commit after one that read newer data.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from proctor.analysis.store import StreamOutcome, recompute
from proctor.core.db.engine import ProctorSession, session_scope

log = logging.getLogger(__name__)

_PENDING_KEY = "proctor.snapshot_campaigns"
# where a session of the app finds the app's worker (proctor.web.app puts it in the
# session factory's ``info``, which every session it makes starts from)
WORKER_KEY = "proctor.snapshot_worker"
# the advisory lock class of a campaign's recomputation (PostgreSQL's two-key form;
# proctor.web.auth.throttle uses 0x50524F31 and 0x50524F32)
_LOCK_RECOMPUTE = 0x50524F33


@contextmanager
def _file_lock(engine: Engine) -> Iterator[None]:
    """SQLite: an exclusive lock on ``<database>.recompute.lock`` (one for all
    campaigns: recomputations on one SQLite file take turns). Nothing for
    PostgreSQL (the lock is taken in the transaction) or a database in memory
    (one process only)."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    fd = os.open(f"{database}.recompute.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def recompute_locked(
    session_factory: sessionmaker[ProctorSession], campaign_id: int
) -> list[StreamOutcome]:
    """``recompute`` in a transaction of its own, holding the campaign's lock
    across processes from before the first read until the commit."""
    engine: Any = session_factory.kw["bind"]
    with _file_lock(engine), session_scope(session_factory) as session:
        if engine.dialect.name == "postgresql":
            session.execute(sa.select(sa.func.pg_advisory_xact_lock(_LOCK_RECOMPUTE, campaign_id)))
        return recompute(session, campaign_id=campaign_id)


@dataclass(frozen=True)
class Run:
    """One background recomputation, for the admin status page."""

    campaign_id: int
    started: float  # time.time()
    seconds: float
    outcomes: tuple[StreamOutcome, ...] = ()
    error: str | None = None


@dataclass
class WorkerStatus:
    pending: list[int]
    running: int | None
    recent: list[Run] = field(default_factory=list)


class SnapshotWorker:
    def __init__(self, session_factory: sessionmaker[ProctorSession]) -> None:
        self.session_factory = session_factory
        self._pending: dict[int, None] = {}  # ordered set
        self._running: int | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._closed = False
        self.recent: deque[Run] = deque(maxlen=50)

    def request(self, campaign_id: int) -> None:
        """Queue a recomputation of this campaign (all label streams); nothing
        once the worker is closed (its app has shut down)."""
        with self._lock:
            if self._closed:
                log.info("snapshot worker closed: campaign %s not queued", campaign_id)
                return
            self._pending[int(campaign_id)] = None
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._drain, name="snapshot-worker", daemon=True
                )
                self._thread.start()

    def close(self) -> None:
        """Take no more work and drop what is queued (the app is shutting
        down; its next start-up queues every stale campaign again). A
        recomputation already running finishes in its own transaction."""
        with self._lock:
            self._closed = True
            self._pending.clear()

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed

    def status(self) -> WorkerStatus:
        with self._lock:
            return WorkerStatus(list(self._pending), self._running, list(self.recent))

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._thread is not None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._thread = None
                    self._running = None
                    self._idle.notify_all()
                    return
                campaign_id = next(iter(self._pending))
                del self._pending[campaign_id]
                self._running = campaign_id
            started, t0 = time.time(), time.perf_counter()
            try:
                outcomes = recompute_locked(self.session_factory, campaign_id)
                run = Run(campaign_id, started, time.perf_counter() - t0, tuple(outcomes))
                for o in outcomes:
                    if o.status == "failed":
                        log.info(
                            "snapshot of campaign %s (%s): %s", campaign_id, o.stream, o.message
                        )
            except Exception as exc:  # a worker must survive one bad campaign
                log.exception("recomputing the snapshots of campaign %s failed", campaign_id)
                run = Run(
                    campaign_id,
                    started,
                    time.perf_counter() - t0,
                    error=f"{type(exc).__name__}: {exc}",
                )
            with self._lock:
                self.recent.append(run)


def worker_of(session: Session) -> SnapshotWorker:
    """The snapshot worker of the app that opened ``session``."""
    worker = session.info.get(WORKER_KEY)
    if not isinstance(worker, SnapshotWorker):
        raise RuntimeError(
            "this session was not opened by the web app: it has no snapshot worker to queue on"
        )
    return worker


def _after_commit(session: Session) -> None:
    pending: set[int] = session.info.pop(_PENDING_KEY, set())
    if not pending:
        return
    worker = worker_of(session)
    for campaign_id in sorted(pending):
        worker.request(campaign_id)


def _after_rollback(session: Session, previous_transaction: Any) -> None:
    # a savepoint rolled back leaves the outer transaction (and its request) alive
    if getattr(previous_transaction, "nested", False):
        return
    session.info.pop(_PENDING_KEY, None)


def recompute_after_commit(session: Session, *, campaign_id: int | None) -> None:
    """Recompute this campaign's snapshots in the background once ``session``
    commits, on the worker of the app the session belongs to. ``None`` (an
    episode outside any campaign) does nothing."""
    if campaign_id is None:
        return
    worker_of(session)  # a session of no app fails here, not silently after the commit
    pending = session.info.setdefault(_PENDING_KEY, set())
    pending.add(int(campaign_id))
    if not event.contains(session, "after_commit", _after_commit):
        event.listen(session, "after_commit", _after_commit)
        event.listen(session, "after_soft_rollback", _after_rollback)
