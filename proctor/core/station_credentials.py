"""Stations' credentials: enrol, rotate, revoke, and check a station's token.

A station proves which station it is with a bearer token an admin issued to
it (``proctor station enrol``): ``pst_`` followed by 43 URL-safe characters
(256 random bits). Only its SHA-256 is stored, as for users' API tokens: the
token has full entropy, so a slow hash would add only latency to every
connection. Its first 12 characters are kept in clear so that an admin can
tell a station's tokens apart.

A token is scoped to its station and nothing else: the policy gateway accepts
a handle only with a live token of the station holding that handle's claim.

Rotation without downtime: ``rotate`` issues a new token and leaves the old
ones valid until the end of a window (``expires_at``), in which the station
host's environment file is changed and its daemon restarted. ``revoke`` ends
tokens at once; a connection already relaying is not cut, the next one is
refused.

The station host holds its token in its environment (``PROCTOR_STATION_TOKEN``),
never in a config file: ``token_from_environment``.

In the kernel because the admin's CLI (``proctor station``, a service) and
the gateway (``proctor.scheduler``, a campaign unit) both use it. Functions
take a keyword-only ``session`` and never commit.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proctor.core.audit import Actor, record_audit
from proctor.core.db.models import Station, StationToken
from proctor.core.db.types import utcnow
from proctor.core.errors import Conflict, NotFound, UsageError

TOKEN_PREFIX = "pst_"
PREFIX_LENGTH = 12
# where a station host's daemon finds its token
TOKEN_ENV = "PROCTOR_STATION_TOKEN"
# long enough to edit a station host's environment file and restart its daemon
# between episodes; short enough that a leaked old token is not good for long
DEFAULT_ROTATION_WINDOW = timedelta(hours=24)
MAX_ROTATION_WINDOW = timedelta(days=30)
# a station name as the scheduler and the station config use it
NAME_MAX = 64


class StationNotFound(NotFound):
    """No station of that name."""


@dataclass(frozen=True)
class IssuedToken:
    """A token as issued: the only time it exists in clear."""

    station_id: int
    station_name: str
    token: str
    prefix: str
    # when the station's older tokens stop being valid (rotation); None at enrolment
    old_tokens_expire_at: datetime | None = None


@dataclass(frozen=True)
class TokenInfo:
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None
    live: bool


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def looks_like_token(value: str) -> bool:
    """Cheap shape check before any hashing or lookup (hostile input)."""
    return value.startswith(TOKEN_PREFIX) and 20 <= len(value) <= 200


def token_from_environment(environ: dict[str, str] | None = None) -> str | None:
    """The station host's token (``PROCTOR_STATION_TOKEN``), or None if unset.
    A set value that is not a station token is refused here, at start-up,
    rather than as a refused connection at the first run."""
    value = (environ if environ is not None else os.environ).get(TOKEN_ENV, "").strip()
    if not value:
        return None
    if not looks_like_token(value):
        raise UsageError(f"{TOKEN_ENV}: not a station token (it starts with '{TOKEN_PREFIX}')")
    return value


def live_clause(now: datetime) -> sa.ColumnElement[bool]:
    """The ``WHERE`` clause of a station's live tokens at ``now`` (the scheduler's
    lease asks which stations have none left)."""
    return _live(now)


def _live(now: datetime) -> sa.ColumnElement[bool]:
    return sa.and_(
        StationToken.revoked_at.is_(None),
        sa.or_(StationToken.expires_at.is_(None), StationToken.expires_at > now),
    )


def _station(session: Session, name: str) -> Station:
    station = session.scalar(sa.select(Station).where(Station.name == name))
    if station is None:
        raise StationNotFound(f"station: no station named '{name}'")
    return station


def _issue(session: Session, station: Station, now: datetime) -> tuple[str, str]:
    token = new_token()
    prefix = token[:PREFIX_LENGTH]
    session.add(
        StationToken(
            station_id=station.id, prefix=prefix, token_hash=hash_token(token), created_at=now
        )
    )
    session.flush()
    return token, prefix


def enrol(
    session: Session,
    *,
    name: str,
    profile: str,
    actor: Actor,
    now: datetime | None = None,
) -> IssuedToken:
    """Register the station (or take its existing row, e.g. one a station made
    for itself on the direct-database work source) and issue its first token.
    A station that already has a live token is refused: rotate it instead."""
    now = now or utcnow()
    name = name.strip()
    if not name or len(name) > NAME_MAX:
        raise UsageError(f"name: a station name has 1 to {NAME_MAX} characters")
    station = session.scalar(sa.select(Station).where(Station.name == name))
    if station is None:
        station = Station(name=name, profile=profile)
        session.add(station)
        session.flush()
    elif session.scalar(
        sa.select(StationToken.id).where(StationToken.station_id == station.id, _live(now))
    ):
        raise Conflict(f"name: station '{name}' is already enrolled; rotate its token instead")
    token, prefix = _issue(session, station, now)
    record_audit(
        session,
        actor=actor,
        action="station.enrol",
        target_type="station",
        target_id=station.id,
        details={"station": name, "token_prefix": prefix},
        at=now,
    )
    return IssuedToken(station.id, name, token, prefix)


def rotate(
    session: Session,
    *,
    name: str,
    window: timedelta = DEFAULT_ROTATION_WINDOW,
    actor: Actor,
    now: datetime | None = None,
) -> IssuedToken:
    """A new token for the station; its other live tokens stay valid until
    ``now + window`` (an earlier expiry they already had is kept)."""
    now = now or utcnow()
    if not timedelta(0) <= window <= MAX_ROTATION_WINDOW:
        raise UsageError(f"window: from 0 to {MAX_ROTATION_WINDOW.days} days")
    station = _station(session, name)
    ends = now + window
    session.execute(
        sa.update(StationToken)
        .where(StationToken.station_id == station.id, _live(now))
        .values(
            expires_at=sa.case(
                (
                    sa.and_(StationToken.expires_at.is_not(None), StationToken.expires_at < ends),
                    StationToken.expires_at,
                ),
                else_=ends,
            )
        ),
        execution_options={"synchronize_session": False},
    )
    token, prefix = _issue(session, station, now)
    record_audit(
        session,
        actor=actor,
        action="station.token_rotate",
        target_type="station",
        target_id=station.id,
        details={"station": name, "token_prefix": prefix, "window_s": window.total_seconds()},
        at=now,
    )
    return IssuedToken(station.id, name, token, prefix, old_tokens_expire_at=ends)


def revoke(
    session: Session,
    *,
    name: str,
    actor: Actor,
    prefix: str | None = None,
    now: datetime | None = None,
) -> list[str]:
    """End the station's live tokens now (only the one with ``prefix`` if
    given). Returns the prefixes revoked; revoking none is an error, so that a
    mistyped prefix is never taken for success."""
    now = now or utcnow()
    station = _station(session, name)
    where = [StationToken.station_id == station.id, _live(now)]
    if prefix is not None:
        where.append(StationToken.prefix == prefix)
    rows = list(session.scalars(sa.select(StationToken).where(*where)))
    if not rows:
        what = f"live token with prefix '{prefix}'" if prefix else "live tokens"
        raise NotFound(f"prefix: station '{name}' has no {what}")
    for row in rows:
        row.revoked_at = now
    revoked = [row.prefix for row in rows]
    record_audit(
        session,
        actor=actor,
        action="station.token_revoke",
        target_type="station",
        target_id=station.id,
        details={"station": name, "token_prefixes": revoked},
        at=now,
    )
    return revoked


def tokens_of(session: Session, *, name: str, now: datetime | None = None) -> list[TokenInfo]:
    """The station's tokens, newest first (never the tokens themselves)."""
    now = now or utcnow()
    station = _station(session, name)
    rows = session.scalars(
        sa.select(StationToken)
        .where(StationToken.station_id == station.id)
        .order_by(StationToken.id.desc())
    )
    return [
        TokenInfo(
            prefix=r.prefix,
            created_at=r.created_at,
            expires_at=r.expires_at,
            last_used_at=r.last_used_at,
            revoked_at=r.revoked_at,
            live=r.revoked_at is None and (r.expires_at is None or r.expires_at > now),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class LiveToken:
    id: int
    station_id: int


def live_token(session: Session, token: str, *, now: datetime | None = None) -> LiveToken | None:
    """The live token (and so the station) a presented token is, or None
    (unknown, revoked, expired, malformed: the caller cannot and need not
    tell which)."""
    if not looks_like_token(token):
        return None
    now = now or utcnow()
    row = session.execute(
        sa.select(StationToken.id, StationToken.station_id).where(
            StationToken.token_hash == hash_token(token), _live(now)
        )
    ).one_or_none()
    return None if row is None else LiveToken(int(row.id), int(row.station_id))


def record_use(session: Session, token_id: int, *, now: datetime | None = None) -> None:
    """Note that a connection was accepted with the token (``last_used_at``),
    in the caller's transaction: during a rotation it tells the admin whether
    the station host has moved to the new token."""
    session.execute(
        sa.update(StationToken)
        .where(StationToken.id == token_id)
        .values(last_used_at=now or utcnow()),
        execution_options={"synchronize_session": False},
    )
