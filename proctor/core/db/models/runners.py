"""Runner servers: uploaded checkpoints served in a sandbox on a runner host
(``proctor/runner``).

One row is one life of one server: requested when something needs the
checkpoint served (a queued conformance check, a running campaign with runs
left), claimed by one runner host (``queued → building``), ``starting`` while
its sandboxed server comes up, ``ready`` once it answers on ``url`` (the
gateway and the conformance checker connect there, never the station), and
then ``stopped`` (idle, or an admin) or ``failed`` with a ``failure`` from a
closed set and whose fault it was. A new life is a new row: the history of
every start and failure stays for the submitter's page and the admin.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from proctor.core.db.models.base import Base, created_at_column
from proctor.core.db.types import JSONType, UTCDateTime, enum_column
from proctor.core.domain import RunnerFailure, RunnerFault, RunnerStatus

_LIVE_SQL = "status IN ('queued', 'building', 'starting', 'ready')"


class RunnerServer(Base):
    __tablename__ = "runner_servers"
    __table_args__ = (
        sa.Index("ix_runner_servers_status_id", "status", "id"),
        # one live server per submission (proctor.core.runner_rows.request_serving)
        sa.Index(
            "uq_runner_servers_live_submission",
            "submission_id",
            unique=True,
            sqlite_where=sa.text(_LIVE_SQL),
            postgresql_where=sa.text(_LIVE_SQL),
        ),
        sa.CheckConstraint(
            "(status = 'failed') = (failure IS NOT NULL)", name="failed_has_failure"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[int] = mapped_column(
        sa.ForeignKey("submissions.id", ondelete="CASCADE"), index=True
    )
    status: Mapped[RunnerStatus] = mapped_column(
        enum_column(RunnerStatus, "runner_status"), default=RunnerStatus.queued
    )
    # what the host is doing now, in words ("building environment: 34 of 80 packages")
    stage: Mapped[str] = mapped_column(sa.String(200), default="waiting for a runner host")
    # why it was requested: "conformance" or "campaign" (the first need that asked)
    requested_for: Mapped[str] = mapped_column(sa.String(32), default="conformance")
    requested_at: Mapped[datetime] = created_at_column()
    # the host that claimed it: its name and host:pid (a restarted worker is a new pid)
    host: Mapped[str | None] = mapped_column(sa.String(128))
    worker: Mapped[str | None] = mapped_column(sa.String(128))
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # where the gateway and the checker reach it (ws://host:port), set when ready
    url: Mapped[str | None] = mapped_column(sa.String(512))
    # the wire it speaks there (openpi, roboarena, positronic_v1)
    dialect: Mapped[str | None] = mapped_column(sa.String(32))
    # "cpu" or "cuda:N" (what CUDA_VISIBLE_DEVICES gave the sandbox)
    device: Mapped[str | None] = mapped_column(sa.String(32))
    ready_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # the worker's heartbeat: a row whose heartbeat stops is the platform's fault
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # the last time a connection was relayed to it (idle servers are stopped)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    failure: Mapped[RunnerFailure | None] = mapped_column(
        enum_column(RunnerFailure, "runner_failure")
    )
    fault: Mapped[RunnerFault | None] = mapped_column(enum_column(RunnerFault, "runner_fault"))
    # a sentence for the submitter ("the server exited with code 1 before it was ready")
    message: Mapped[str | None] = mapped_column(sa.Text)
    # exit code or signal, memory peak, GPU memory peak, the last lines of the
    # server's output, the environment's build log tail, the limits it ran under,
    # what the sandbox refused (proctor/runner/failures.py: Diagnostics)
    diagnostics: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)


class RunnerHost(Base):
    """A runner host's heartbeat: ``proctor runner worker`` writes ``seen_at``
    every tick, whether or not it serves anything, so a conformance check of
    a checkpoint can tell at once that no host is alive to serve it (instead
    of waiting out the build and start limits)."""

    __tablename__ = "runner_hosts"

    # the host's name (one worker per host; a restarted worker takes the row over)
    host: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    # host:pid of the worker that wrote last
    worker: Mapped[str] = mapped_column(sa.String(128))
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
