"""A checkpoint's conformance check waits for its runner server.

The worker asks for the server (``proctor.runner.queue.request_serving``,
reason ``conformance``), then polls its row in short transactions (never
holding one open while a runner host builds for minutes) until it is
``ready``, fails, stops, or the host's own time limits for building and
starting (``RunnerSettings``) have passed — or at once, when no runner host
has written its heartbeat lately (``no_host_alive``). Meanwhile the submitter's page
shows the runner's stage, read from the same row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import sessionmaker

from proctor.core.db.engine import ProctorSession, session_scope
from proctor.core.db.models import RunnerServer, Submission
from proctor.core.db.types import utcnow
from proctor.core.domain import RunnerFault, RunnerStatus, SubmissionKind
from proctor.core.settings import RunnerSettings
from proctor.runner import queue as runner_queue
from proctor.web.submissions.runner_view import failure_words, fault_words

REASON = "conformance"


@dataclass(frozen=True)
class Waited:
    """One of: the server's ``url`` (ready), a failed ``report`` (the server
    failed by the submitter's fault), or an ``error`` (the run ends ``error``
    and the submission keeps its status: the platform's failure, a stopped
    server, or no host in time)."""

    url: str | None = None
    report: dict[str, Any] | None = None
    error: str | None = None


def request(
    session: ProctorSession, submission_id: int, *, now: datetime, since: datetime | None = None
) -> int | None:
    """The id of the checkpoint's live runner server (asked for now if none);
    None when the submission is not a checkpoint. A server that a runner host
    queued for this check ahead of it (``since``: when the check was queued)
    and that has failed by the submitter's fault already is the check's
    answer: asking again would run the failing (or hostile) checkpoint a
    second time for nothing."""
    sub = session.get(Submission, submission_id)
    if sub is None or sub.kind != SubmissionKind.checkpoint:
        return None
    latest = runner_queue.latest_server(session, sub.id)
    if (
        since is not None
        and latest is not None
        and latest.status == RunnerStatus.failed
        and latest.fault == RunnerFault.submitter
        and latest.requested_at >= since
    ):
        return latest.id
    return runner_queue.request_serving(session, sub.id, reason=REASON, now=now).id


def wait_ready(
    sessions: sessionmaker[ProctorSession],
    runner_id: int,
    settings: RunnerSettings,
    *,
    poll_s: float = 1.0,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], datetime] = utcnow,
) -> Waited:
    """Wait for the server, within the host's build and start limits; at once
    an error when no runner host is alive to serve it (none has written its
    heartbeat for ``HOST_ABSENT_FACTOR`` × ``settings.stale_after_s``): the
    check then holds no worker for the limits' 40 minutes, and says why it
    did not run."""
    deadline = monotonic() + settings.build_timeout_s + settings.ready_timeout_s
    while True:
        with session_scope(sessions) as session:
            server = session.get(RunnerServer, runner_id)
            waited = _settled(server)
            seen = runner_queue.last_host_seen(session) if waited is None else None
        if waited is not None:
            return waited
        absent = no_host_alive(
            seen, now=clock(), window_s=HOST_ABSENT_FACTOR * settings.stale_after_s
        )
        if absent is not None:
            return Waited(error=absent)
        if monotonic() >= deadline:
            return Waited(
                error="no runner host served the checkpoint in time "
                f"({settings.build_timeout_s + settings.ready_timeout_s:g} s)"
            )
        sleep(poll_s)


# a host is presumed gone only after this many of its rows' stale windows: a
# live host's beat can lag a window behind (its write queued behind SQLite's
# lock, or the host starved on a loaded machine), and a check failed on a live
# host is a false "cannot be served"; the suite saw one 8 s late against 5 s
HOST_ABSENT_FACTOR = 3


def no_host_alive(seen: datetime | None, *, now: datetime, window_s: float) -> str | None:
    """Why no runner host can serve now (None when one wrote its heartbeat
    within ``window_s``): the reason the check ends with."""
    if seen is None:
        return "no runner host is alive (none has ever been seen): the checkpoint cannot be served"
    age = (now - seen).total_seconds()
    if age <= window_s:
        return None
    return (
        f"no runner host is alive (last seen {seen:%Y-%m-%d %H:%M:%S} UTC, {age:.0f} s ago): "
        "the checkpoint cannot be served"
    )


def _settled(server: RunnerServer | None) -> Waited | None:
    if server is None:
        return Waited(error="the runner server's row vanished")
    if server.status == RunnerStatus.ready and server.url:
        return Waited(url=server.url)
    if server.status == RunnerStatus.stopped:
        return Waited(error="the runner server was stopped before it was ready")
    if server.status != RunnerStatus.failed:
        return None
    if server.fault == RunnerFault.platform:
        return Waited(
            error=f"the runner failed, by our fault ({server.failure}): "
            f"{server.message or failure_words(server.failure)}"
        )
    return Waited(report=failed_report(server))


def failed_report(server: RunnerServer) -> dict[str, Any]:
    """The check's report when the runner failed first: one finding naming
    the failure, whose fault it was, and the host's message."""
    failure = server.failure.value if server.failure else "unknown"
    why = failure_words(server.failure) or failure
    message = f"The runner server failed ({failure}: {why}); fault: {fault_words(server.fault)}."
    if server.message:
        message += f" {server.message}"
    return {
        "format": "proctor.conformance/1",
        "verdict": "failed",
        "summary": f"Failed: {message}",
        "findings": [
            {
                "check": "runner",
                "title": "Runner server",
                "status": "failed",
                "message": message,
                "details": {
                    "failure": failure,
                    "fault": server.fault.value if server.fault else None,
                    "runner_id": server.id,
                },
            }
        ],
    }
