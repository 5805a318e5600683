"""Login throttling, counted from the audit log.

Sign-in attempts are audit rows anyway, so they are also the throttle's
memory: it survives restarts and is shared by every server process on the
same database.

**Reserve, then verify.** An attempt is first *reserved*: in a short
transaction of its own, holding a lock on its username and on its client
address, the limits are counted and a ``login.attempt`` row is written and
committed. Only then is the password checked, and the outcome written
(``login.success`` or ``login.failure``, naming the attempt). So concurrent
guesses cannot all pass the check before any of them is counted: a guess in
flight already counts. The lock is ``pg_advisory_xact_lock`` on PostgreSQL
and SQLite's write lock (``BEGIN IMMEDIATE``) on SQLite; both hold across
processes. An attempt whose outcome never arrives (a crash mid-check) counts
as a failure.

**The policy** (``ThrottlePolicy``, each over a sliding window of 15 min):

* ``per_user_client`` (5): attempts for one username from one client address
  since that account's last successful sign-in. This is what stops someone
  guessing one person's password from one machine.
* ``per_user`` (20): attempts for one username from all addresses since its
  last success. Higher than the one above on purpose: five wrong passwords
  from someone else's machine no longer lock the real user out; only a
  guesser spread over many addresses does, and then only at 20 guesses per
  15 minutes.
* ``per_client`` (20): unsuccessful attempts from one client address (one
  machine trying many accounts).

While a limit is reached the password is not even checked, and the answer
says how long to wait (HTTP 429 with Retry-After). Throttled attempts are
audited as ``login.throttled`` and do not extend the lock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from proctor.core.audit import Actor, record_audit
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import AuditLog, User

LOGIN_ATTEMPT = "login.attempt"
LOGIN_SUCCESS = "login.success"
LOGIN_FAILURE = "login.failure"
LOGIN_THROTTLED = "login.throttled"

# the two classes of advisory lock (PostgreSQL's two-key form): one per
# username, one per client address; always taken in this order
_LOCK_USER = 0x50524F31
_LOCK_CLIENT = 0x50524F32


@dataclass(frozen=True)
class ThrottlePolicy:
    per_user_client: int = 5
    per_user: int = 20
    per_client: int = 20
    window: timedelta = timedelta(minutes=15)


@dataclass(frozen=True)
class Throttled:
    reason: str  # "account-client", "account" or "client"
    retry_after_s: int

    @property
    def message(self) -> str:
        minutes = max(1, math.ceil(self.retry_after_s / 60))
        wait = f"{minutes} minute{'s' if minutes != 1 else ''}"
        if self.reason == "account-client":
            return (
                f"Too many failed sign-ins for this account from this address. Try again in {wait}."
            )
        if self.reason == "account":
            return f"Too many failed sign-ins for this account. Try again in {wait}."
        return f"Too many failed sign-ins from this address. Try again in {wait}."


@dataclass(frozen=True)
class Reservation:
    """An attempt that may go on: its ``login.attempt`` row is committed."""

    attempt_id: int


def reserve_login_attempt(
    *,
    session: ProctorSession,
    username: str,
    client: str,
    now: datetime,
    policy: ThrottlePolicy,
) -> Reservation | Throttled:
    """Count the limits and, if none is reached, write the attempt's row.

    ``session`` must be a fresh session used for nothing else; the caller
    commits it at once (it holds the lock until then)."""
    _lock(session, username=username, client=client)
    throttled = check_login_throttle(
        session=session, username=username, client=client, now=now, policy=policy
    )
    details: dict[str, object] = {"client": client}
    if throttled is not None:
        _row(session, LOGIN_THROTTLED, now, username, details | {"limit": throttled.reason})
        return throttled
    row = _row(session, LOGIN_ATTEMPT, now, username, details)
    session.flush()
    return Reservation(row.id)


def check_login_throttle(
    *,
    session: ProctorSession,
    username: str,
    client: str,
    now: datetime,
    policy: ThrottlePolicy,
) -> Throttled | None:
    """Which limit this attempt would exceed, if any (call under the lock)."""
    since = now - policy.window
    in_window = sa.and_(AuditLog.action == LOGIN_ATTEMPT, AuditLog.at > since)
    by_user = AuditLog.target_id == username
    by_client = AuditLog.details["client"].as_string() == client

    # attempts before the account's last success do not count against it
    last_success = session.scalar(
        sa.select(sa.func.max(AuditLog.details["attempt"].as_integer())).where(
            AuditLog.action == LOGIN_SUCCESS, AuditLog.target_id == username
        )
    )
    after_success = AuditLog.id > (last_success or 0)
    for reason, where, limit in (
        ("account-client", sa.and_(by_user, by_client, after_success), policy.per_user_client),
        ("account", sa.and_(by_user, after_success), policy.per_user),
    ):
        times = _attempt_times(session, sa.and_(in_window, where), limit)
        if len(times) >= limit:
            return Throttled(reason, _retry_after(times, policy, now))

    succeeded = sa.select(AuditLog.details["attempt"].as_integer()).where(
        AuditLog.action == LOGIN_SUCCESS,
        AuditLog.at > since,
        AuditLog.details["attempt"].as_integer().is_not(None),
    )
    times = _attempt_times(
        session, sa.and_(in_window, by_client, AuditLog.id.not_in(succeeded)), policy.per_client
    )
    if len(times) >= policy.per_client:
        return Throttled("client", _retry_after(times, policy, now))
    return None


def record_outcome(
    *,
    session: ProctorSession,
    reservation: Reservation,
    username: str,
    client: str,
    now: datetime,
    user: User | None = None,
    failure: str = "",
) -> None:
    """The attempt's outcome: success when ``user`` is given, else a failure
    saying why. Both name the attempt they end."""
    details: dict[str, object] = {"client": client, "attempt": reservation.attempt_id}
    if user is not None:
        _row(session, LOGIN_SUCCESS, now, username, details, actor=user)
    else:
        _row(session, LOGIN_FAILURE, now, username, details | {"reason": failure})


def _lock(session: ProctorSession, *, username: str, client: str) -> None:
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        for cls, key in ((_LOCK_USER, username), (_LOCK_CLIENT, client)):
            conn.execute(
                sa.text("SELECT pg_advisory_xact_lock(:cls, hashtext(:key))"),
                {"cls": cls, "key": key},
            )
    elif conn.dialect.name == "sqlite":
        # the database's one write lock, taken before reading: the count and
        # the insert are then one step for every connection and process
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:  # pragma: no cover - the project supports these two
        raise RuntimeError(f"login throttle: no lock for {conn.dialect.name}")


def _row(
    session: ProctorSession,
    action: str,
    now: datetime,
    username: str,
    details: dict[str, object],
    *,
    actor: User | None = None,
) -> AuditLog:
    return record_audit(
        session,
        actor=Actor.of(actor, label="" if actor is not None else "anonymous"),
        action=action,
        target_type="user",
        target_id=username,
        details=details,
        at=now,
    )


def _attempt_times(
    session: ProctorSession, where: sa.ColumnElement[bool], limit: int
) -> list[datetime]:
    """The newest ``limit`` attempt times matching ``where``, newest first."""
    rows = session.scalars(
        sa.select(AuditLog.at).where(where).order_by(AuditLog.at.desc()).limit(limit)
    )
    return list(rows)


def _retry_after(attempts: list[datetime], policy: ThrottlePolicy, now: datetime) -> int:
    # the lock lifts when the oldest of the newest `limit` attempts leaves the window
    oldest_counted = attempts[-1]
    return max(1, math.ceil((oldest_counted + policy.window - now).total_seconds()))
