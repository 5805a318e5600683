"""Checkpoint submissions in a campaign: asking for their runner servers, and
whether a run of one can be handed to a station now.

A checkpoint is served by a runner host (``proctor/runner``), which moves a
``RunnerServer`` row from ``queued`` to ``ready`` (with the ``url`` and
``dialect`` the gateway relays to). The scheduler only reads those rows and
asks for one: every checkpoint submission of a running campaign with runs
left must have a live server, so any runner host picks it up. The request is
the kernel's ``proctor.core.runner_rows.request_serving`` (a live row, or a
new ``queued`` one), the same the runner hosts and the conformance worker make.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proctor.core.db.models import Assignment, CampaignPolicy, RunnerServer, Submission
from proctor.core.db.types import utcnow
from proctor.core.domain import AssignmentStatus, RunnerStatus, SubmissionKind
from proctor.core.runner_rows import live_server, request_serving, serving

CAMPAIGN_REASON = "campaign"


def ready_server(session: Session, submission_id: int) -> RunnerServer | None:
    """The submission's server the gateway may connect to now, if any."""
    server = live_server(session, submission_id)
    return server if server is not None and serving(server) else None


def checkpoints_with_runs_left(session: Session, campaign_id: int) -> list[int]:
    """Checkpoint submissions of the campaign's active policies that have a
    pending or claimed run."""
    active = sa.select(CampaignPolicy.policy_id).where(
        CampaignPolicy.campaign_id == campaign_id, CampaignPolicy.active.is_(True)
    )
    return list(
        session.scalars(
            sa.select(Submission.id)
            .join(Assignment, Assignment.submission_id == Submission.id)
            .where(
                Assignment.campaign_id == campaign_id,
                Assignment.status.in_((AssignmentStatus.pending, AssignmentStatus.claimed)),
                Assignment.policy_id.in_(active),
                Submission.kind == SubmissionKind.checkpoint,
            )
            .distinct()
            .order_by(Submission.id)
        )
    )


def not_ready(
    session: Session, submission_ids: Iterable[int], *, now: datetime | None = None
) -> dict[int, str]:
    """Of these checkpoint submissions, the ones whose server is not ready,
    each with why in words (its stage). Each gets a live server requested:
    a failed or stopped one is asked for again, and a host will take it."""
    waiting: dict[int, str] = {}
    for submission_id in submission_ids:
        server = request_serving(session, submission_id, reason=CAMPAIGN_REASON, now=now)
        if not serving(server, now):
            waiting[submission_id] = waiting_reason(server)
    return waiting


def waiting_reason(server: RunnerServer) -> str:
    """What a run of this server's checkpoint waits for, for the campaign's pages."""
    if server.status == RunnerStatus.ready:
        return "waiting for runner: its host stopped reporting"
    return f"waiting for runner: {server.stage or server.status.value}"


def request_for_campaign(
    session: Session, campaign_id: int, *, now: datetime | None = None
) -> dict[int, str]:
    """Ask for a server for every checkpoint of the campaign with runs left;
    returns those not ready yet (submission id → why)."""
    return not_ready(session, checkpoints_with_runs_left(session, campaign_id), now=now)


def waiting_now(session: Session, campaign_id: int) -> dict[int, str]:
    """Checkpoint submissions of the campaign with runs left whose server is
    not ready (submission id → why), read only: for the campaign's pages."""
    waiting: dict[int, str] = {}
    for submission_id in checkpoints_with_runs_left(session, campaign_id):
        server = live_server(session, submission_id)
        if server is None:
            waiting[submission_id] = "waiting for runner: not requested yet"
        elif not serving(server):
            waiting[submission_id] = waiting_reason(server)
    return waiting


# a runner host notices its server's end within a few heartbeats of the
# station seeing the connection drop; a failure written this long after the
# episode ended is still this episode's
FAILURE_GRACE = timedelta(seconds=60)


def failed_during(
    session: Session,
    submission_id: int | None,
    started_at: datetime | None,
    ended_at: datetime | None,
) -> RunnerServer | None:
    """The submission's server that was ready when the episode began and
    failed while it ran (or within ``FAILURE_GRACE`` of its end), if any."""
    if submission_id is None or started_at is None:
        return None
    until = (ended_at or utcnow()) + FAILURE_GRACE
    return session.scalars(
        sa.select(RunnerServer)
        .where(
            RunnerServer.submission_id == submission_id,
            RunnerServer.status == RunnerStatus.failed,
            RunnerServer.ready_at.is_not(None),
            RunnerServer.ready_at <= started_at,
            RunnerServer.finished_at >= started_at,
            RunnerServer.finished_at <= until,
        )
        .order_by(RunnerServer.id.desc())
        .limit(1)
    ).first()
