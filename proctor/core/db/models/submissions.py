"""Submissions in progress: checkpoint uploads being received, and the queue
of conformance checks (``proctor/web/submissions``)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from proctor.core.db.models.base import Base, created_at_column
from proctor.core.db.types import UTCDateTime, enum_column
from proctor.core.domain import ConformanceRunStatus


class UploadSession(Base):
    """A resumable checkpoint upload. Its bytes are staged in a file named by
    ``id`` under the upload folder; ``received_bytes`` is the durable offset
    (the staged file is fsynced before it moves). The row and the file go
    away together: when the upload becomes a submission, is rejected, is
    cancelled, or expires."""

    __tablename__ = "upload_sessions"
    __table_args__ = (
        sa.CheckConstraint("size_bytes > 0", name="size_positive"),
        sa.CheckConstraint(
            "received_bytes >= 0 AND received_bytes <= size_bytes", name="received_in_range"
        ),
    )

    # random, unguessable: it names the staged file too
    id: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    owner_id: Mapped[int] = mapped_column(sa.ForeignKey("users.id"), index=True)
    filename: Mapped[str] = mapped_column(sa.String(255))
    size_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    # declared by the client, at creation or at completion
    sha256: Mapped[str | None] = mapped_column(sa.String(64))
    received_bytes: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)


class ConformanceRun(Base):
    """One conformance check of a submission. The web app queues it; a worker
    process claims it (``queued → running``), runs the check and writes the
    report onto the submission (``done``)."""

    __tablename__ = "conformance_runs"
    __table_args__ = (sa.Index("ix_conformance_runs_status_id", "status", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[int] = mapped_column(
        sa.ForeignKey("submissions.id", ondelete="CASCADE"), index=True
    )
    status: Mapped[ConformanceRunStatus] = mapped_column(
        enum_column(ConformanceRunStatus, "conformance_run_status"),
        default=ConformanceRunStatus.queued,
    )
    requested_by_id: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id"))
    requested_at: Mapped[datetime] = created_at_column()
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # host:pid of the process that ran it
    worker: Mapped[str | None] = mapped_column(sa.String(128))
    # why the checker itself failed (status error); the policy's verdict is the report
    error: Mapped[str | None] = mapped_column(sa.Text)
