"""Login throttling, counted from the audit log.

Failed sign-ins are audit rows anyway (``login.failure``), so they are also
the throttle's memory: it survives restarts and is shared by every server
process on the same database. Two limits, each over a sliding window:

* per username: ``per_user`` failures since that account's last successful
  sign-in (guessing one person's password);
* per client address: ``per_client`` failures (one machine trying many
  accounts).

While a limit is reached the password is not even checked, and the answer
says how long to wait (HTTP 429 with Retry-After). Throttled attempts are
audited as ``login.throttled`` and do not extend the lock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from proctor.db.engine import ProctorSession
from proctor.db.models import AuditLog

LOGIN_SUCCESS = "login.success"
LOGIN_FAILURE = "login.failure"
LOGIN_THROTTLED = "login.throttled"


@dataclass(frozen=True)
class ThrottlePolicy:
    per_user: int = 5
    per_client: int = 20
    window: timedelta = timedelta(minutes=15)


@dataclass(frozen=True)
class Throttled:
    reason: str  # "account" or "client"
    retry_after_s: int

    @property
    def message(self) -> str:
        minutes = max(1, math.ceil(self.retry_after_s / 60))
        wait = f"{minutes} minute{'s' if minutes != 1 else ''}"
        if self.reason == "account":
            return f"Too many failed sign-ins for this account. Try again in {wait}."
        return f"Too many failed sign-ins from this address. Try again in {wait}."


def check_login_throttle(
    *,
    session: ProctorSession,
    username: str,
    client: str,
    now: datetime,
    policy: ThrottlePolicy,
) -> Throttled | None:
    since = now - policy.window

    last_success = session.scalar(
        sa.select(sa.func.max(AuditLog.at)).where(
            AuditLog.action == LOGIN_SUCCESS, AuditLog.target_id == username
        )
    )
    user_since = max(since, last_success) if last_success is not None else since
    user_failures = _failure_times(
        session, since=user_since, where=AuditLog.target_id == username, limit=policy.per_user
    )
    if len(user_failures) >= policy.per_user:
        return Throttled("account", _retry_after(user_failures, policy, now))

    client_failures = _failure_times(
        session,
        since=since,
        where=AuditLog.details["client"].as_string() == client,
        limit=policy.per_client,
    )
    if len(client_failures) >= policy.per_client:
        return Throttled("client", _retry_after(client_failures, policy, now))
    return None


def _failure_times(
    session: ProctorSession, *, since: datetime, where: sa.ColumnElement[bool], limit: int
) -> list[datetime]:
    """The newest ``limit`` failure times after ``since``, newest first."""
    rows = session.scalars(
        sa.select(AuditLog.at)
        .where(AuditLog.action == LOGIN_FAILURE, AuditLog.at > since, where)
        .order_by(AuditLog.at.desc())
        .limit(limit)
    )
    return list(rows)


def _retry_after(failures: list[datetime], policy: ThrottlePolicy, now: datetime) -> int:
    # the lock lifts when the oldest of the newest `limit` failures leaves the window
    oldest_counted = failures[-1]
    return max(1, math.ceil((oldest_counted + policy.window - now).total_seconds()))
