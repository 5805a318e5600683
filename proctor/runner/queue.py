"""The runner queue: which checkpoints must be served, and by which host.

Anything that needs a checkpoint served asks ``request_serving`` (the
conformance worker before a check; the runner host itself for every running
campaign with runs left: ``sync_demand``). A runner host claims a queued row
atomically (``claim``: ``queued → building``), so any number of hosts can
serve one database. A row whose host stops writing its heartbeat is the
platform's fault: ``fail_stale`` ends it ``runner_unresponsive`` and, if the
checkpoint is still needed, a new row is queued for any host to take.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proctor.core.db.models import RunnerServer, Submission
from proctor.core.db.types import utcnow
from proctor.core.domain import RunnerStatus

LIVE = (RunnerStatus.queued, RunnerStatus.building, RunnerStatus.starting, RunnerStatus.ready)


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
    session: Session, submission: Submission, *, reason: str, now: datetime | None = None
) -> RunnerServer:
    """The submission's live server, queued now if there is none. Idempotent:
    a second request while one is live returns it."""
    live = live_server(session, submission.id)
    if live is not None:
        return live
    row = RunnerServer(
        submission_id=submission.id,
        status=RunnerStatus.queued,
        requested_for=reason,
        requested_at=now or utcnow(),
        stage="waiting for a runner host",
        diagnostics={},
    )
    session.add(row)
    session.flush()
    return row
