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

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proctor.core.db.models import (
    Assignment,
    Campaign,
    ConformanceRun,
    RunnerServer,
    Submission,
)
from proctor.core.domain import (
    AssignmentStatus,
    CampaignStatus,
    ConformanceRunStatus,
    RunnerFailure,
    RunnerFault,
    RunnerStatus,
    SubmissionKind,
)
from proctor.core.runner_rows import (
    LIVE,
    host_seen,
    last_host_seen,
    latest_server,
    live_server,
    request_serving,
)

# what queue users need of the rows, in one place for every unit
__all__ = [
    "LIVE",
    "host_seen",
    "last_host_seen",
    "latest_server",
    "live_server",
    "request_serving",
]


# ------------------------------------------------------------ demand


def needed_submissions(session: Session) -> dict[int, str]:
    """Checkpoint submissions something needs served now → why: a running
    campaign with runs of it pending or claimed, or a conformance check
    queued or running."""
    campaign = (
        sa.select(Assignment.submission_id)
        .join(Campaign, Campaign.id == Assignment.campaign_id)
        .where(
            Campaign.status == CampaignStatus.running,
            Assignment.status.in_([AssignmentStatus.pending, AssignmentStatus.claimed]),
        )
    )
    checks = sa.select(ConformanceRun.submission_id).where(
        ConformanceRun.status.in_([ConformanceRunStatus.queued, ConformanceRunStatus.running])
    )
    needed: dict[int, str] = {}
    for reason, query in (("conformance", checks), ("campaign", campaign)):
        ids = session.scalars(
            sa.select(Submission.id).where(
                Submission.kind == SubmissionKind.checkpoint, Submission.id.in_(query)
            )
        )
        needed.update({sid: reason for sid in ids})
    return needed


def _served_for_its_check(session: Session, submission_id: int) -> bool:
    """Whether a server asked for since the submission's pending check was
    queued failed by the submitter's fault: the check fails with it, and
    serving it again would only run the failing (or hostile) checkpoint once
    more every tick. A platform failure is served again, as anywhere."""
    since = session.scalar(
        sa.select(sa.func.min(ConformanceRun.requested_at)).where(
            ConformanceRun.submission_id == submission_id,
            ConformanceRun.status.in_([ConformanceRunStatus.queued, ConformanceRunStatus.running]),
        )
    )
    if since is None:
        return False
    return (
        session.scalar(
            sa.select(RunnerServer.id)
            .where(
                RunnerServer.submission_id == submission_id,
                RunnerServer.requested_at >= since,
                RunnerServer.fault == RunnerFault.submitter,
            )
            .limit(1)
        )
        is not None
    )


def sync_demand(session: Session, now: datetime) -> list[RunnerServer]:
    """Queue a server for every needed checkpoint that has no live one (not
    again for a check whose server failed by the submitter's fault)."""
    queued = []
    for sid, reason in needed_submissions(session).items():
        if reason == "conformance" and _served_for_its_check(session, sid):
            continue
        if live_server(session, sid) is None:
            sub = session.get(Submission, sid)
            if sub is not None:
                queued.append(request_serving(session, sub.id, reason=reason, now=now))
    return queued


# ------------------------------------------------------------ a host's rows


def claim(session: Session, *, host: str, worker: str, now: datetime) -> RunnerServer | None:
    """Take the oldest queued server (``queued → building``), or None. The
    conditional update makes two hosts racing for one row take it once."""
    for row_id in session.scalars(
        sa.select(RunnerServer.id)
        .where(RunnerServer.status == RunnerStatus.queued)
        .order_by(RunnerServer.id)
        .limit(8)
    ).all():
        taken = session.execute(
            sa.update(RunnerServer)
            .where(RunnerServer.id == row_id, RunnerServer.status == RunnerStatus.queued)
            .values(
                status=RunnerStatus.building,
                host=host,
                worker=worker,
                claimed_at=now,
                heartbeat_at=now,
                stage="claimed by a runner host",
            )
            .execution_options(synchronize_session=False)
        )
        if taken.rowcount == 1:  # type: ignore[attr-defined]
            session.flush()
            return session.get(RunnerServer, row_id, populate_existing=True)
    return None


def _mine(session: Session, row_id: int, worker: str) -> RunnerServer | None:
    """The row if this worker still holds it (another host may have failed it stale)."""
    row = session.get(RunnerServer, row_id, populate_existing=True, with_for_update=True)
    if row is None or row.worker != worker or row.status not in LIVE:
        return None
    return row


def set_stage(
    session: Session, row_id: int, worker: str, stage: str, now: datetime, *, status: RunnerStatus
) -> bool:
    row = _mine(session, row_id, worker)
    if row is None:
        return False
    row.stage, row.status, row.heartbeat_at = stage[:200], status, now
    session.flush()
    return True


def mark_ready(
    session: Session,
    row_id: int,
    worker: str,
    *,
    url: str,
    dialect: str,
    device: str,
    now: datetime,
) -> bool:
    row = _mine(session, row_id, worker)
    if row is None:
        return False
    row.status, row.stage = RunnerStatus.ready, "ready"
    row.url, row.dialect, row.device = url, dialect, device
    row.ready_at = row.heartbeat_at = row.last_used_at = now
    session.flush()
    return True


def heartbeat(session: Session, worker: str, row_ids: list[int], now: datetime) -> None:
    if row_ids:
        session.execute(
            sa.update(RunnerServer)
            .where(
                RunnerServer.id.in_(row_ids),
                RunnerServer.worker == worker,
                RunnerServer.status.in_(LIVE),
            )
            .values(heartbeat_at=now)
            .execution_options(synchronize_session=False)
        )


def finish(
    session: Session,
    row_id: int,
    *,
    now: datetime,
    failure: RunnerFailure | None,
    message: str,
    diagnostics: dict[str, Any],
    worker: str | None = None,
) -> bool:
    """End a live row: ``failed`` with ``failure`` (its fault recorded), or
    ``stopped``. With ``worker``, only if that worker still holds it."""
    row = session.get(RunnerServer, row_id, populate_existing=True, with_for_update=True)
    if row is None or row.status not in LIVE or (worker is not None and row.worker != worker):
        return False
    row.status = RunnerStatus.failed if failure else RunnerStatus.stopped
    row.failure = failure
    row.fault = failure.fault if failure else None
    row.message = message[:4000]
    row.stage = "failed" if failure else "stopped"
    row.diagnostics = {**(row.diagnostics or {}), **diagnostics}
    row.finished_at = now
    session.flush()
    return True


def fail_stale(session: Session, *, now: datetime, stale_after_s: float) -> list[int]:
    """Rows held by a host that stopped writing its heartbeat: the platform's
    fault (``runner_unresponsive``). ``sync_demand`` queues a new life."""
    cutoff = now - timedelta(seconds=stale_after_s)
    stale = session.scalars(
        sa.select(RunnerServer.id).where(
            RunnerServer.status.in_(LIVE[1:]), RunnerServer.heartbeat_at < cutoff
        )
    ).all()
    for row_id in stale:
        finish(
            session,
            row_id,
            now=now,
            failure=RunnerFailure.runner_unresponsive,
            message="the runner host stopped reporting; the server was started again elsewhere "
            "or will be (this does not count against the policy)",
            diagnostics={},
        )
    return list(stale)
