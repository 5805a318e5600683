"""Who is making this request: a signed-in person (session cookie) or a
script (API token). Resolved once per request by ``proctor.web.deps``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

import sqlalchemy as sa
from fastapi import HTTPException, status

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import ApiToken, User
from proctor.core.domain import Role
from proctor.core.errors import Forbidden
from proctor.core.settings import WebSettings
from proctor.scheduler.naming import Viewer
from proctor.web.auth import tokens
from proctor.web.auth.sessions import SessionState, marks_match, session_mark

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# last_used_at is bookkeeping, not an access log: write it at most this often
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    """The authenticated caller. ``roles`` are the roles this request may
    exercise: the user's roles, narrowed by the token's scopes for a token.

    ``user`` is the ORM row, bound to the request's database session; the
    plain fields are copied at sign-in so that an error page rendered after
    the session has closed can still say who is signed in."""

    user: User
    roles: frozenset[Role]
    via: Literal["session", "token"]
    token_id: int | None = None
    read_only: bool = False
    scopes: tuple[str, ...] = ()
    id: int = field(init=False)
    username: str = field(init=False)
    label: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", self.user.id)
        object.__setattr__(self, "username", self.user.username)
        object.__setattr__(self, "label", self.user.display_name or self.user.username)

    def has_role(self, *roles: Role) -> bool:
        return any(r in self.roles for r in roles)

    @property
    def is_admin(self) -> bool:
        return Role.admin in self.roles


def viewer(who: Principal | None) -> Viewer | None:
    """The caller as the scheduler's naming rule sees it (``proctor.scheduler.naming``):
    the rule lives below the web and takes no web types."""
    return None if who is None else Viewer(user_id=who.id, is_admin=who.is_admin)


class NotSignedIn(HTTPException):
    """401. Pages turn it into a redirect to the sign-in page."""

    def __init__(self, detail: str = "sign in required", *, expired: bool = False) -> None:
        super().__init__(
            status.HTTP_401_UNAUTHORIZED, detail=detail, headers={"WWW-Authenticate": "Bearer"}
        )
        self.expired = expired


def user_roles(user: User) -> frozenset[Role]:
    return frozenset(r.role for r in user.roles)


def principal_from_token(
    *, session: ProctorSession, token: str, method: str, now: datetime
) -> tuple[Principal, ApiToken]:
    """Check a bearer token; raise ``NotSignedIn`` saying why it is refused."""
    row = session.scalar(sa.select(ApiToken).where(ApiToken.token_hash == tokens.hash_token(token)))
    if row is None:
        raise NotSignedIn("invalid API token")
    if row.revoked_at is not None:
        raise NotSignedIn("API token revoked")
    if row.expires_at is not None and row.expires_at <= now:
        raise NotSignedIn("API token expired")
    user = row.user
    if not user.is_active:
        raise NotSignedIn("account deactivated")
    read_only = tokens.is_read_only(row.scopes)
    if read_only and method not in SAFE_METHODS:
        raise Forbidden("this API token is read-only")
    roles = user_roles(user) & tokens.role_scopes(row.scopes)
    principal = Principal(
        user=user,
        roles=roles,
        via="token",
        token_id=row.id,
        read_only=read_only,
        scopes=tuple(row.scopes),
    )
    return principal, row


def token_needs_touch(row: ApiToken, now: datetime) -> bool:
    return row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION


@dataclass(frozen=True)
class SessionCheck:
    principal: Principal | None
    expired: bool = False


def principal_from_session(
    *,
    session: ProctorSession,
    state: SessionState,
    web: WebSettings,
    secret_key: str,
    now: datetime,
) -> SessionCheck:
    """The signed-in user of a session cookie, or why there is none. An
    expired or stale session is cleared (the response deletes the cookie)."""
    if state.user_id is None:
        return SessionCheck(None)
    ts = now.timestamp()
    idle_limit = web.session_idle_minutes * 60
    life_limit = web.session_max_hours * 3600
    if (
        state.signed_in_at is None
        or state.seen_at is None
        or ts - state.seen_at > idle_limit
        or ts - state.signed_in_at > life_limit
    ):
        state.sign_out()
        return SessionCheck(None, expired=True)
    user = session.get(User, state.user_id)
    if (
        user is None
        or not user.is_active
        or not marks_match(session_mark(secret_key, user), state.mark)
    ):
        # deactivated, deleted, signed out, the password changed since sign-in,
        # or an account without a password (never a page session)
        state.sign_out()
        return SessionCheck(None, expired=True)
    state.touch(ts)
    return SessionCheck(Principal(user=user, roles=user_roles(user), via="session"))
