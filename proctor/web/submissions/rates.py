"""What one submitter may ask for in an hour: endpoints registered, uploads,
conformance checks asked for again.

Each asks for work the platform does on the submitter's behalf (a check
holds a worker and, for a checkpoint, a runner host), so each is limited per
submitter (``submissions.*_per_hour``; 429 with ``Retry-After`` beyond it).
The counts come from the rows the requests leave, over the last hour, so
they hold across web workers and restarts; the owner's lock (``lock_owner``)
is taken first, so requests of one submitter racing each other are counted
one after another. Admins are not limited.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import aliased

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import ConformanceRun, Submission, UploadSession, User
from proctor.core.domain import Role, SubmissionKind
from proctor.core.errors import RateLimited
from proctor.core.settings import Settings

WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class Limit:
    # the field of SubmissionSettings that holds the number per hour
    setting: str
    # what is counted, in the refusal ("endpoint registrations")
    words: str
    # the times of the counted rows of one user since a moment, as one query
    times: Callable[[int, datetime], sa.Select[Any]]


def _registrations(user_id: int, since: datetime) -> sa.Select[Any]:
    return sa.select(Submission.created_at).where(
        Submission.submitted_by_id == user_id,
        Submission.kind == SubmissionKind.endpoint,
        Submission.created_at > since,
    )


def _uploads(user_id: int, since: datetime) -> sa.Select[Any]:
    # an upload is a session while it is open and a checkpoint submission once
    # complete (the session's row is deleted then): each counts once
    open_ = sa.select(UploadSession.created_at.label("at")).where(
        UploadSession.owner_id == user_id, UploadSession.created_at > since
    )
    done = sa.select(Submission.created_at.label("at")).where(
        Submission.submitted_by_id == user_id,
        Submission.kind == SubmissionKind.checkpoint,
        Submission.created_at > since,
    )
    both = sa.union_all(open_, done).subquery()
    return sa.select(both.c.at)


def _rechecks(user_id: int, since: datetime) -> sa.Select[Any]:
    # a run asked for after the submission's first (which its registration or
    # upload queued, and is counted there)
    earlier = aliased(ConformanceRun)
    return sa.select(ConformanceRun.requested_at).where(
        ConformanceRun.requested_by_id == user_id,
        ConformanceRun.requested_at > since,
        sa.exists().where(
            earlier.submission_id == ConformanceRun.submission_id, earlier.id < ConformanceRun.id
        ),
    )


LIMITS: dict[str, Limit] = {
    "registration": Limit("registrations_per_hour", "endpoint registrations", _registrations),
    "upload": Limit("uploads_per_hour", "checkpoint uploads", _uploads),
    "recheck": Limit("rechecks_per_hour", "conformance checks asked for again", _rechecks),
}


def enforce(
    session: ProctorSession, what: str, *, settings: Settings, user: User, now: datetime
) -> None:
    """Refuse (``RateLimited``) a request of ``what`` kind (a key of
    ``LIMITS``) when ``user`` has made the hour's allowance of them already.
    Call it inside the request's transaction, before the row is written."""
    if user.has_role(Role.admin):
        return
    limit = LIMITS[what]
    allowed: int = getattr(settings.submissions, limit.setting)
    lock_owner(session, user.id)
    query = limit.times(user.id, now - WINDOW)
    column = query.selected_columns[0]
    times: list[datetime] = list(session.scalars(query.order_by(column).limit(allowed)))
    if len(times) < allowed:
        return
    # the oldest counted leaves the window first, and frees a place
    retry = math.ceil((times[0] + WINDOW - now).total_seconds())
    raise RateLimited(
        f"too many {limit.words}: {allowed} in the last hour is this server's limit "
        f"(submissions.{limit.setting}); try again in {max(1, retry)} s",
        retry_after_s=retry,
    )


def lock_owner(session: ProctorSession, owner_id: int) -> None:
    """Hold the owner's row until the transaction ends. PostgreSQL: a row lock
    (``FOR UPDATE``). SQLite: a write to the row, which takes the database's
    write lock now, before anything is counted (a read alone would not: the
    driver begins the transaction at the first write), so a second request
    waits (``busy_timeout``) until the first has committed."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(sa.select(User.id).where(User.id == owner_id).with_for_update())
    else:
        session.execute(
            sa.update(User).where(User.id == owner_id).values(id=User.id),
            execution_options={"synchronize_session": False},
        )
