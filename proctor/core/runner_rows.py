"""A checkpoint's runner servers as rows: which one is live, and asking for one.

The scheduler (a campaign's runs need it served), the conformance worker (a
check needs it) and the runner hosts (``proctor/runner``) all ask here, so a
request means one thing everywhere: the submission's live server, or a new
``queued`` one. At most one server per submission is live at a time — a
partial unique index holds it, so two askers racing (two stations claiming at
once, a host's demand sync beside them) still queue one.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from proctor.core.db.models import RunnerHost, RunnerServer
from proctor.core.db.types import utcnow
from proctor.core.domain import RunnerStatus

# a server in one of these is wanted and may still become (or be) ready
LIVE = (RunnerStatus.queued, RunnerStatus.building, RunnerStatus.starting, RunnerStatus.ready)
# a ready server whose host has not written its heartbeat for this long is not
# handed to a station (its host may have died: until a host fails the row
# stale, a run would be claimed against a server that is gone). Hosts write
# every runner.heartbeat_s, which the settings keep at a third of this or less.
SILENT_AFTER_S = 15.0


def serving(server: RunnerServer, now: datetime | None = None) -> bool:
    """Whether the server is ready, has its address, and its host is alive."""
    if server.status != RunnerStatus.ready or not server.url:
        return False
    beat = server.heartbeat_at
    return beat is not None and ((now or utcnow()) - beat).total_seconds() <= SILENT_AFTER_S


def live_server(session: Session, submission_id: int) -> RunnerServer | None:
    """The submission's server that is queued, coming up or ready, if any."""
    return session.scalars(
        sa.select(RunnerServer)
        .where(RunnerServer.submission_id == submission_id, RunnerServer.status.in_(LIVE))
        .order_by(RunnerServer.id.desc())
        .limit(1)
    ).first()


def latest_server(session: Session, submission_id: int) -> RunnerServer | None:
    """The submission's most recent server, whatever its state (for its page)."""
    return session.scalars(
        sa.select(RunnerServer)
        .where(RunnerServer.submission_id == submission_id)
        .order_by(RunnerServer.id.desc())
        .limit(1)
    ).first()


def request_serving(
    session: Session, submission_id: int, *, reason: str, now: datetime | None = None
) -> RunnerServer:
    """The submission's live server, queued now if there is none. Idempotent,
    and safe against a concurrent request (the unique index refuses the
    second row; the first is returned)."""
    live = live_server(session, submission_id)
    if live is not None:
        return live
    row = RunnerServer(
        submission_id=submission_id,
        status=RunnerStatus.queued,
        requested_for=reason,
        requested_at=now or utcnow(),
        stage="waiting for a runner host",
        diagnostics={},
    )
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        raced = live_server(session, submission_id)
        if raced is None:
            raise
        return raced
    return row


def host_seen(session: Session, *, host: str, worker: str, now: datetime) -> None:
    """A runner host's heartbeat (``RunnerHost``): written every tick of its worker."""
    updated = session.execute(
        sa.update(RunnerHost)
        .where(RunnerHost.host == host)
        .values(worker=worker, seen_at=now)
        .execution_options(synchronize_session=False)
    )
    if updated.rowcount:  # type: ignore[attr-defined]
        return
    try:
        with session.begin_nested():
            session.add(RunnerHost(host=host, worker=worker, seen_at=now))
    except IntegrityError:  # a worker of the same host wrote first: its beat stands
        pass


def last_host_seen(session: Session) -> datetime | None:
    """When any runner host last wrote its heartbeat (None: never)."""
    return session.scalar(sa.select(sa.func.max(RunnerHost.seen_at)))
