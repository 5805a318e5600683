"""Accounts: users, roles, passwords, sign-in, API tokens.

Functions take a keyword-only ``session`` and never commit: the request (or
the CLI command) owns the transaction. Every change that matters for
security writes an audit row in the same transaction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from proctor.core.audit import Actor, record_audit
from proctor.core.db.engine import ProctorSession, session_scope
from proctor.core.db.models import ApiToken, User, UserRole
from proctor.core.db.models.people import new_session_nonce
from proctor.core.domain import Role
from proctor.core.errors import Conflict, FieldError
from proctor.web.accounts.schemas import TokenStatus
from proctor.web.auth import tokens
from proctor.web.auth.passwords import Passwords, PasswordsBusy, password_problem
from proctor.web.auth.throttle import (
    Throttled,
    ThrottlePolicy,
    record_outcome,
    reserve_login_attempt,
)

USERNAME_MAX = 64


def _audit(
    session: ProctorSession,
    actor: Actor,
    action: str,
    now: datetime,
    target: User | ApiToken,
    **details: object,
) -> None:
    target_type = "user" if isinstance(target, User) else "api_token"
    record_audit(
        session,
        actor=actor,
        action=action,
        target_type=target_type,
        target_id=target.id,
        details=dict(details),
        at=now,
    )


# -- users -------------------------------------------------------------------


def get_user(session: ProctorSession, user_id: int) -> User | None:
    return session.get(User, user_id)


def get_user_by_username(session: ProctorSession, username: str) -> User | None:
    return session.scalar(sa.select(User).where(User.username == username.strip().lower()))


def list_users(session: ProctorSession) -> list[User]:
    return list(session.scalars(sa.select(User).order_by(User.username)))


def roles_of(user: User) -> list[Role]:
    return sorted((r.role for r in user.roles), key=list(Role).index)


def create_user(
    *,
    session: ProctorSession,
    passwords: Passwords,
    username: str,
    password: str | None,
    roles: Iterable[Role] = (),
    display_name: str = "",
    email: str | None = None,
    actor: Actor,
    now: datetime,
) -> User:
    username = username.strip().lower()
    if get_user_by_username(session, username) is not None:
        raise Conflict(f"username '{username}' is already taken")
    password_hash = None
    if password is not None:
        problem = password_problem(password, username=username)
        if problem:
            raise FieldError("password", problem)
        password_hash = passwords.hash(password)
    user = User(
        username=username,
        display_name=display_name,
        email=email or None,
        password_hash=password_hash,
        is_active=True,
        created_at=now,
    )
    user.roles = [UserRole(role=r) for r in sorted(set(roles), key=list(Role).index)]
    session.add(user)
    session.flush()
    _audit(
        session,
        actor,
        "user.create",
        now,
        user,
        username=username,
        roles=[r.value for r in roles_of(user)],
        has_password=password_hash is not None,
    )
    return user


def _active_admin_count(session: ProctorSession, *, excluding: int | None = None) -> int:
    q = (
        sa.select(sa.func.count())
        .select_from(User)
        .join(UserRole, UserRole.user_id == User.id)
        .where(UserRole.role == Role.admin, User.is_active.is_(True))
    )
    if excluding is not None:
        q = q.where(User.id != excluding)
    return int(session.scalar(q) or 0)


def _keeps_an_admin(session: ProctorSession, user: User) -> None:
    """Refuse a change that would leave no active admin to undo it."""
    if (
        user.has_role(Role.admin)
        and user.is_active
        and _active_admin_count(session, excluding=user.id) == 0
    ):
        raise Conflict(f"'{user.username}' is the last active admin; make someone else admin first")


def set_roles(
    *, session: ProctorSession, user: User, roles: Iterable[Role], actor: Actor, now: datetime
) -> None:
    wanted = set(roles)
    before = roles_of(user)
    if wanted == set(before):
        return
    if Role.admin not in wanted:
        _keeps_an_admin(session, user)
    user.roles = [r for r in user.roles if r.role in wanted] + [
        UserRole(role=r) for r in sorted(wanted - set(before), key=list(Role).index)
    ]
    session.flush()
    _audit(
        session,
        actor,
        "user.roles",
        now,
        user,
        before=[r.value for r in before],
        after=[r.value for r in roles_of(user)],
    )


def set_active(
    *, session: ProctorSession, user: User, active: bool, actor: Actor, now: datetime
) -> None:
    if user.is_active == active:
        return
    if not active:
        _keeps_an_admin(session, user)
        end_sessions(user)
    user.is_active = active
    session.flush()
    _audit(session, actor, "user.activate" if active else "user.deactivate", now, user)


def set_password(
    *,
    session: ProctorSession,
    passwords: Passwords,
    user: User,
    password: str,
    actor: Actor,
    now: datetime,
    field: str = "password",
) -> None:
    """Set a new password; every session opened with the old one ends. When
    someone else sets it (an admin's reset: the account may be compromised),
    the user's API tokens are revoked too."""
    problem = password_problem(password, username=user.username)
    if problem:
        raise FieldError(field, problem)
    user.password_hash = passwords.hash(password)
    end_sessions(user)
    session.flush()
    reset = actor.user_id is None or actor.user_id != user.id
    revoked = revoke_user_tokens(session=session, user=user, actor=actor, now=now) if reset else 0
    _audit(session, actor, "user.password", now, user, reset=reset, tokens_revoked=revoked)


def end_sessions(user: User) -> None:
    """End every page session of ``user`` (all devices): their marks were
    made with the old nonce (``proctor.web.auth.sessions.session_mark``)."""
    user.session_nonce = new_session_nonce()


def update_profile(
    *,
    session: ProctorSession,
    user: User,
    display_name: str | None,
    email: str | None,
    actor: Actor,
    now: datetime,
) -> None:
    changed: dict[str, object] = {}
    if display_name is not None and display_name != user.display_name:
        changed["display_name"] = display_name
        user.display_name = display_name
    if email is not None and (email or None) != user.email:
        changed["email"] = email or None
        user.email = email or None
    if changed:
        session.flush()
        _audit(session, actor, "user.update", now, user, **changed)


# -- signing in --------------------------------------------------------------


@dataclass(frozen=True)
class LoginResult:
    user: User | None
    throttled: Throttled | None = None
    busy: bool = False
    message: str = ""


WRONG_CREDENTIALS = "Wrong username or password."
BUSY = "The server is busy; try again in a few seconds."


def authenticate(
    *,
    session: ProctorSession,
    reserve_in: sessionmaker[ProctorSession],
    passwords: Passwords,
    username: str,
    password: str,
    client: str,
    now: datetime,
    policy: ThrottlePolicy,
) -> LoginResult:
    """Check a sign-in attempt and audit it (success, failure or throttled).
    Returns the user on success; the caller starts the session.

    The attempt is reserved first, in a transaction of its own from
    ``reserve_in`` that is committed before the password is checked (see
    ``proctor.web.auth.throttle``); the outcome goes into ``session``."""
    name = username.strip().lower()[:USERNAME_MAX]
    client = client[:64]
    with session_scope(reserve_in) as reserving:
        reserved = reserve_login_attempt(
            session=reserving, username=name, client=client, now=now, policy=policy
        )
    if isinstance(reserved, Throttled):
        return LoginResult(None, throttled=reserved, message=reserved.message)

    def failed(reason: str, message: str = WRONG_CREDENTIALS, busy: bool = False) -> LoginResult:
        record_outcome(
            session=session,
            reservation=reserved,
            username=name,
            client=client,
            now=now,
            failure=reason,
        )
        return LoginResult(None, busy=busy, message=message)

    user = get_user_by_username(session, name) if name else None
    try:
        if user is None or user.password_hash is None:
            passwords.burn(password)
            return failed("unknown user" if user is None else "no password")
        if not passwords.verify(user.password_hash, password):
            return failed("wrong password")
    except PasswordsBusy:
        return failed("server busy", BUSY, busy=True)
    if not user.is_active:
        return failed("inactive", "This account is deactivated; ask an admin to reactivate it.")

    if passwords.needs_rehash(user.password_hash):
        # an upgrade, not a requirement: skipped when the server is busy
        with contextlib.suppress(PasswordsBusy):
            user.password_hash = passwords.hash(password)
    record_outcome(
        session=session, reservation=reserved, username=name, client=client, now=now, user=user
    )
    return LoginResult(user)


# -- API tokens --------------------------------------------------------------


def token_status(token: ApiToken, now: datetime) -> TokenStatus:
    if token.revoked_at is not None:
        return TokenStatus.revoked
    if token.expires_at is not None and token.expires_at <= now:
        return TokenStatus.expired
    return TokenStatus.active


def list_tokens(session: ProctorSession, user_id: int) -> list[ApiToken]:
    return list(
        session.scalars(
            sa.select(ApiToken).where(ApiToken.user_id == user_id).order_by(ApiToken.id.desc())
        )
    )


def get_token(session: ProctorSession, token_id: int) -> ApiToken | None:
    return session.get(ApiToken, token_id)


def create_token(
    *,
    session: ProctorSession,
    user: User,
    name: str,
    scopes: Iterable[str],
    expires_in_days: int | None,
    allowed_roles: Iterable[Role],
    actor: Actor,
    now: datetime,
    not_after: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Mint a token; returns the row and the token itself (shown once).

    ``allowed_roles`` are the roles the caller may hand on: a token can never
    carry a role its creator could not use in the creating request. Likewise
    it never outlives ``not_after`` (the expiry of a token that creates it)."""
    scope_set = sorted(set(scopes), key=[s.value for s in tokens.Scope].index)
    allowed = {r.value for r in allowed_roles}
    for scope in scope_set:
        if scope not in {s.value for s in tokens.Scope}:
            raise FieldError("scopes", f"unknown scope '{scope}'")
        if scope != tokens.READ_ONLY and scope not in allowed:
            raise FieldError("scopes", f"you cannot grant the '{scope}' role to a token")
    if not name.strip():
        raise FieldError("name", "must not be empty")
    expires_at = now + timedelta(days=expires_in_days) if expires_in_days else None
    if not_after is not None and (expires_at is None or expires_at > not_after):
        expires_at = not_after
    plaintext = tokens.new_token()
    row = ApiToken(
        user_id=user.id,
        name=name.strip(),
        prefix=tokens.display_prefix(plaintext),
        token_hash=tokens.hash_token(plaintext),
        scopes=scope_set,
        created_at=now,
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    _audit(
        session,
        actor,
        "token.create",
        now,
        row,
        user=user.username,
        name=row.name,
        scopes=scope_set,
        expires_at=row.expires_at.isoformat() if row.expires_at else None,
    )
    return row, plaintext


def revoke_token(*, session: ProctorSession, token: ApiToken, actor: Actor, now: datetime) -> None:
    if token.revoked_at is not None:
        return
    token.revoked_at = now
    session.flush()
    _audit(session, actor, "token.revoke", now, token, user_id=token.user_id, name=token.name)


def revoke_user_tokens(*, session: ProctorSession, user: User, actor: Actor, now: datetime) -> int:
    """Revoke every live token of ``user``; returns how many."""
    live = session.scalars(
        sa.select(ApiToken).where(ApiToken.user_id == user.id, ApiToken.revoked_at.is_(None))
    ).all()
    for token in live:
        revoke_token(session=session, token=token, actor=actor, now=now)
    return len(live)


def find_token(session: ProctorSession, ref: str) -> ApiToken | None:
    """A token by id or by its displayed prefix (``prt_abcd1234``)."""
    if ref.isdigit():
        return session.get(ApiToken, int(ref))
    matches = list(session.scalars(sa.select(ApiToken).where(ApiToken.prefix == ref)))
    if len(matches) > 1:
        raise Conflict(f"more than one token has the prefix '{ref}'; use its id")
    return matches[0] if matches else None
