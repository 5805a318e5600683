"""Accounts: the JSON API (``/api/me``, ``/api/tokens``, ``/api/users``,
``/api/audit``) and the pages (sign-in, my account, the admin's users)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated
from urllib.parse import urlsplit

import sqlalchemy as sa
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from proctor.core.audit import Actor, record_audit
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import ApiToken, AuditLog, User
from proctor.core.domain import Role
from proctor.core.errors import Forbidden, NotFound, UsageError
from proctor.web.accounts import service
from proctor.web.accounts.schemas import (
    AuditOut,
    MeOut,
    RolesIn,
    TokenCreate,
    TokenCreated,
    TokenOut,
    UserCreate,
    UserOut,
    UserUpdate,
)
from proctor.web.auth.access import check_owner_access
from proctor.web.auth.identity import Principal
from proctor.web.auth.passwords import PasswordsBusy
from proctor.web.auth.sessions import SessionState, session_mark
from proctor.web.auth.tokens import Scope
from proctor.web.deps import (
    AppStateDep,
    CsrfProtected,
    CurrentUser,
    DbId,
    FormDep,
    NowDep,
    OptionalUser,
    SessionDep,
    SessionStateDep,
    form_text,
    require_role,
)
from proctor.web.errors import error_responses
from proctor.web.templating import render

api_router = APIRouter(tags=["accounts"], responses=error_responses(401, 403, 404, 409))
page_router = APIRouter()
# sign-in and sign-out alone: all a console-only host serves of this domain
sign_in_router = APIRouter()

AdminUser = Annotated[Principal, require_role(Role.admin)]
NO_STORE = {"Cache-Control": "no-store"}


def user_out(user: User) -> UserOut:
    return UserOut(
        id=user.id,
        username=user.username,
        display_name=user.display_name,
        email=user.email,
        is_active=user.is_active,
        roles=service.roles_of(user),
        created_at=user.created_at,
    )


def token_out(token: ApiToken, now: datetime) -> TokenOut:
    return TokenOut(
        id=token.id,
        user_id=token.user_id,
        name=token.name,
        prefix=token.prefix,
        scopes=list(token.scopes),
        created_at=token.created_at,
        expires_at=token.expires_at,
        last_used_at=token.last_used_at,
        revoked_at=token.revoked_at,
        status=service.token_status(token, now),
    )


def _actor(who: Principal) -> Actor:
    return Actor.of(who.user)


def _user_or_404(session: ProctorSession, user_id: int) -> User:
    user = service.get_user(session, user_id)
    if user is None:
        raise NotFound("user not found")
    return user


def _token_for(session: ProctorSession, who: Principal, token_id: int) -> ApiToken:
    """A token its owner (or an admin) may see; anyone else gets 404."""
    token = service.get_token(session, token_id)
    if token is None:
        raise NotFound("token not found")
    check_owner_access(who, token.user_id, what="token")
    return token


# == JSON API ================================================================


@api_router.get("/me", response_model=MeOut, summary="Who am I")
def me(who: CurrentUser) -> MeOut:
    base = user_out(who.user)
    return MeOut(
        **base.model_dump(),
        authenticated_via=who.via,
        effective_roles=sorted(who.roles, key=list(Role).index),
        token_scopes=[Scope(s) for s in who.scopes] if who.via == "token" else None,
    )


@api_router.get("/me/tokens", response_model=list[TokenOut], summary="My API tokens")
def my_tokens(who: CurrentUser, session: SessionDep, now: NowDep) -> list[TokenOut]:
    return [token_out(t, now) for t in service.list_tokens(session, who.id)]


@api_router.post(
    "/me/tokens",
    response_model=TokenCreated,
    status_code=201,
    summary="Create an API token (the response is the only time it is shown)",
)
def create_my_token(
    body: TokenCreate,
    who: CurrentUser,
    session: SessionDep,
    now: NowDep,
    response: Response,
    app: AppStateDep,
    state: SessionStateDep,
) -> TokenCreated:
    """From a page session, only within ``web.token_reauth_minutes`` of
    signing in. The token expires after ``expires_in_days`` (default
    ``web.token_expiry_days``), and never after a token that creates it."""
    check_recent_sign_in(who, state, app, now)
    parent = session.get(ApiToken, who.token_id) if who.token_id is not None else None
    row, plaintext = service.create_token(
        session=session,
        user=who.user,
        name=body.name,
        scopes=[s.value for s in body.scopes],
        expires_in_days=body.expires_in_days or app.settings.web.token_expiry_days,
        allowed_roles=who.roles,
        actor=_actor(who),
        now=now,
        # a short-lived token must not mint itself a longer life
        not_after=parent.expires_at if parent is not None else None,
    )
    response.headers.update(NO_STORE)
    return TokenCreated(**token_out(row, now).model_dump(), token=plaintext)


REAUTH_NEEDED = (
    "creating an API token needs a recent sign-in: sign out and in again, then create it "
    "within {minutes} minutes"
)


def check_recent_sign_in(
    who: Principal, state: SessionState, app: AppStateDep, now: datetime
) -> None:
    """A session cookie left on a shared machine (or copied) must not turn
    into a credential that outlives it: minting a token from a page session
    needs a recent sign-in. A token may mint narrower tokens: its holder
    already has a lasting credential."""
    if who.via != "session":
        return
    minutes = app.settings.web.token_reauth_minutes
    if state.signed_in_at is None or now.timestamp() - state.signed_in_at > minutes * 60:
        raise Forbidden(REAUTH_NEEDED.format(minutes=minutes))


@api_router.get("/tokens/{token_id}", response_model=TokenOut, summary="One API token")
def get_token(token_id: DbId, who: CurrentUser, session: SessionDep, now: NowDep) -> TokenOut:
    return token_out(_token_for(session, who, token_id), now)


@api_router.delete("/tokens/{token_id}", response_model=TokenOut, summary="Revoke an API token")
def revoke_token(token_id: DbId, who: CurrentUser, session: SessionDep, now: NowDep) -> TokenOut:
    token = _token_for(session, who, token_id)
    service.revoke_token(session=session, token=token, actor=_actor(who), now=now)
    return token_out(token, now)


@api_router.get("/users", response_model=list[UserOut], summary="All users (admin)")
def list_users(who: AdminUser, session: SessionDep) -> list[UserOut]:
    return [user_out(u) for u in service.list_users(session)]


@api_router.post("/users", response_model=UserOut, status_code=201, summary="Add a user (admin)")
def create_user(
    body: UserCreate, who: AdminUser, session: SessionDep, now: NowDep, app: AppStateDep
) -> UserOut:
    user = service.create_user(
        session=session,
        passwords=app.passwords,
        username=body.username,
        password=body.password,
        roles=body.roles,
        display_name=body.display_name,
        email=body.email,
        actor=_actor(who),
        now=now,
    )
    return user_out(user)


@api_router.get("/users/{user_id}", response_model=UserOut, summary="One user (admin)")
def get_user(user_id: DbId, who: AdminUser, session: SessionDep) -> UserOut:
    return user_out(_user_or_404(session, user_id))


@api_router.patch("/users/{user_id}", response_model=UserOut, summary="Change a user (admin)")
def update_user(
    user_id: DbId,
    body: UserUpdate,
    who: AdminUser,
    session: SessionDep,
    now: NowDep,
    app: AppStateDep,
) -> UserOut:
    user = _user_or_404(session, user_id)
    actor = _actor(who)
    service.update_profile(
        session=session,
        user=user,
        display_name=body.display_name,
        email=body.email,
        actor=actor,
        now=now,
    )
    if body.password is not None:
        service.set_password(
            session=session,
            passwords=app.passwords,
            user=user,
            password=body.password,
            actor=actor,
            now=now,
        )
    if body.is_active is not None:
        service.set_active(session=session, user=user, active=body.is_active, actor=actor, now=now)
    return user_out(user)


@api_router.put("/users/{user_id}/roles", response_model=UserOut, summary="Set roles (admin)")
def set_roles(
    user_id: DbId, body: RolesIn, who: AdminUser, session: SessionDep, now: NowDep
) -> UserOut:
    user = _user_or_404(session, user_id)
    service.set_roles(session=session, user=user, roles=body.roles, actor=_actor(who), now=now)
    return user_out(user)


@api_router.get(
    "/users/{user_id}/tokens", response_model=list[TokenOut], summary="A user's tokens (admin)"
)
def user_tokens(user_id: DbId, who: AdminUser, session: SessionDep, now: NowDep) -> list[TokenOut]:
    user = _user_or_404(session, user_id)
    return [token_out(t, now) for t in service.list_tokens(session, user.id)]


@api_router.get("/audit", response_model=list[AuditOut], summary="The audit log (admin)")
def audit_log(
    who: AdminUser,
    session: SessionDep,
    action: Annotated[str | None, Query(max_length=64, pattern=r"^[a-z0-9._-]+$")] = None,
    before_id: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[AuditOut]:
    """Newest first; page back with ``before_id`` (the last id you saw)."""
    q = sa.select(AuditLog).order_by(AuditLog.id.desc()).limit(limit)
    if action:
        q = q.where(AuditLog.action == action)
    if before_id:
        q = q.where(AuditLog.id < before_id)
    return [AuditOut.model_validate(row) for row in session.scalars(q)]


# == pages ===================================================================


def safe_next(target: str | None) -> str:
    """Only a path on this site: never another host (an open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return "/"
    return target


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


@sign_in_router.get("/login")
def login_page(
    request: Request, who: OptionalUser, next: str = "/", expired: str | None = None
) -> Response:
    return render(
        request,
        "accounts/login.html",
        {
            "next": safe_next(next),
            "username": "",
            "error": "",
            "notice": "Your session expired; sign in again." if expired else "",
        },
    )


@sign_in_router.post("/login", dependencies=[CsrfProtected])
def login(
    request: Request,
    form: FormDep,
    session: SessionDep,
    app: AppStateDep,
    now: NowDep,
    state: SessionStateDep,
) -> Response:
    username = form_text(form, "username")
    next_path = safe_next(form_text(form, "next"))
    result = service.authenticate(
        session=session,
        reserve_in=app.session_factory,
        passwords=app.passwords,
        username=username,
        password=form_text(form, "password"),
        client=_client(request),
        now=now,
        policy=app.throttle,
    )
    if result.user is None:
        # returned, not raised: the failure's audit row must be committed
        headers = {}
        status = 401
        if result.throttled is not None:
            status = 429
            headers["Retry-After"] = str(result.throttled.retry_after_s)
        elif result.busy:
            status = 503
            headers["Retry-After"] = str(PasswordsBusy.retry_after_s)
        return render(
            request,
            "accounts/login.html",
            {"next": next_path, "username": username[:64], "error": result.message, "notice": ""},
            status_code=status,
            headers=headers,
        )
    mark = session_mark(app.secret_key, result.user)
    assert mark is not None  # signed in with a password
    state.sign_in(result.user.id, mark, now.timestamp())
    return RedirectResponse(next_path, status_code=303)


@sign_in_router.post("/logout", dependencies=[CsrfProtected])
def logout(who: OptionalUser, session: SessionDep, now: NowDep, state: SessionStateDep) -> Response:
    if who is not None:
        if who.via == "session":
            # the cookie may have been copied: end it on the server, with
            # every other page session of this user (docs: proctor/web/README.md)
            service.end_sessions(who.user)
        record_audit(
            session,
            actor=Actor.of(who.user),
            action="logout",
            target_type="user",
            target_id=who.username,
            at=now,
        )
    state.sign_out()
    state.flash("You are signed out.")
    return RedirectResponse("/", status_code=303)


def _account_page(
    request: Request,
    who: Principal,
    session: ProctorSession,
    now: datetime,
    *,
    errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:
    return render(
        request,
        "accounts/account.html",
        {
            "user": who.user,
            "roles": service.roles_of(who.user),
            "tokens": [token_out(t, now) for t in service.list_tokens(session, who.id)],
            "grantable": [Scope(r.value) for r in sorted(who.roles, key=list(Role).index)],
            "errors": errors or {},
        },
        status_code=status_code,
    )


@page_router.get("/account")
def account_page(request: Request, who: CurrentUser, session: SessionDep, now: NowDep) -> Response:
    return _account_page(request, who, session, now)


EXPIRY_CHOICES = {"30": 30, "90": 90, "365": 365}


@page_router.post("/account/tokens")
def create_token_from_page(
    request: Request,
    form: FormDep,
    who: CurrentUser,
    session: SessionDep,
    now: NowDep,
    app: AppStateDep,
    state: SessionStateDep,
) -> Response:
    name = form_text(form, "name").strip()
    scopes = [s for s in form.getlist("scopes") if isinstance(s, str)]
    expiry = form_text(form, "expires_in_days")
    errors: dict[str, str] = {}
    try:
        check_recent_sign_in(who, state, app, now)
    except Forbidden as exc:
        errors["form"] = str(exc)
    if not name:
        errors["name"] = "give the token a name, so you can tell it apart later"
    elif len(name) > 128 or any(ord(c) < 32 or ord(c) == 127 for c in name):
        errors["name"] = "at most 128 printable characters"
    if expiry not in EXPIRY_CHOICES:
        errors["expires_in_days"] = "choose one of the offered lifetimes"
    if not errors:
        try:
            row, plaintext = service.create_token(
                session=session,
                user=who.user,
                name=name,
                scopes=scopes,
                expires_in_days=EXPIRY_CHOICES[expiry],
                allowed_roles=who.roles,
                actor=_actor(who),
                now=now,
            )
        except UsageError as exc:
            field = getattr(exc, "field", "scopes")
            errors[field] = getattr(exc, "message", str(exc))
        else:
            return render(
                request,
                "accounts/token_created.html",
                {"token": token_out(row, now), "plaintext": plaintext},
                headers=NO_STORE,
            )
    session.rollback()
    return _account_page(request, who, session, now, errors=errors, status_code=422)


@page_router.post("/account/tokens/{token_id}/revoke")
def revoke_token_from_page(
    token_id: DbId, who: CurrentUser, session: SessionDep, now: NowDep, state: SessionStateDep
) -> Response:
    token = _token_for(session, who, token_id)
    service.revoke_token(session=session, token=token, actor=_actor(who), now=now)
    state.flash(f"Token “{token.name}” ({token.prefix}…) is revoked.")
    return RedirectResponse("/account", status_code=303)


@page_router.post("/account/password")
def change_password(
    request: Request,
    form: FormDep,
    who: CurrentUser,
    session: SessionDep,
    now: NowDep,
    app: AppStateDep,
    state: SessionStateDep,
) -> Response:
    current = form_text(form, "current_password")
    new = form_text(form, "new_password")
    errors: dict[str, str] = {}
    if not app.passwords.verify(who.user.password_hash, current):
        errors["current_password"] = "this is not your current password"
    elif new != form_text(form, "confirm_password"):
        errors["confirm_password"] = "the two new passwords differ"
    else:
        try:
            service.set_password(
                session=session,
                passwords=app.passwords,
                user=who.user,
                password=new,
                actor=_actor(who),
                now=now,
                field="new_password",
            )
        except UsageError as exc:
            errors[getattr(exc, "field", "new_password")] = getattr(exc, "message", str(exc))
    if errors:
        session.rollback()
        return _account_page(request, who, session, now, errors=errors, status_code=422)
    # this session carries on; every other one ends with the old password
    mark = session_mark(app.secret_key, who.user)
    assert mark is not None  # a password was just set
    state.sign_in(who.id, mark, now.timestamp())
    state.flash("Your password is changed. Other sessions are signed out.")
    return RedirectResponse("/account", status_code=303)


# -- admin: users -------------------------------------------------------------


def _users_page(
    request: Request,
    session: ProctorSession,
    *,
    errors: dict[str, str] | None = None,
    values: dict[str, object] | None = None,
    status_code: int = 200,
) -> Response:
    users = service.list_users(session)
    return render(
        request,
        "accounts/admin_users.html",
        {
            "users": users,
            "roles_of": service.roles_of,
            "all_roles": list(Role),
            "errors": errors or {},
            "values": values or {},
        },
        status_code=status_code,
    )


@page_router.get("/admin/users")
def users_page(request: Request, who: AdminUser, session: SessionDep) -> Response:
    return _users_page(request, session)


@page_router.post("/admin/users")
def create_user_from_page(
    request: Request,
    form: FormDep,
    who: AdminUser,
    session: SessionDep,
    now: NowDep,
    app: AppStateDep,
    state: SessionStateDep,
) -> Response:
    values = {
        "username": form_text(form, "username").strip().lower(),
        "display_name": form_text(form, "display_name").strip(),
        "email": form_text(form, "email").strip(),
        "roles": [r for r in form.getlist("roles") if isinstance(r, str)],
    }
    password = form_text(form, "password")
    try:
        body = UserCreate.model_validate(
            {**values, "email": values["email"] or None, "password": password or None}
        )
    except ValueError as exc:
        return _users_page(
            request, session, errors=_form_errors(exc), values=values, status_code=422
        )
    try:
        user = service.create_user(
            session=session,
            passwords=app.passwords,
            username=body.username,
            password=body.password,
            roles=body.roles,
            display_name=body.display_name,
            email=body.email,
            actor=_actor(who),
            now=now,
        )
    except UsageError as exc:
        session.rollback()
        errors = {getattr(exc, "field", "username"): getattr(exc, "message", str(exc))}
        return _users_page(request, session, errors=errors, values=values, status_code=422)
    state.flash(f"User {user.username} is added.")
    return RedirectResponse("/admin/users", status_code=303)


def _form_errors(exc: ValueError) -> dict[str, str]:
    errors: dict[str, str] = {}
    for err in getattr(exc, "errors", list)():
        field = str(err["loc"][0]) if err.get("loc") else "form"
        errors.setdefault(field, err.get("msg", "invalid"))
    return errors or {"form": str(exc)}


def _admin_change(
    state: SessionStateDep, session: ProctorSession, change: Callable[[], None], done: str
) -> Response:
    """Run one admin change; a refusal is flashed, and nothing is written."""
    try:
        change()
    except UsageError as exc:
        session.rollback()
        state.flash(str(exc), "error")
    else:
        state.flash(done)
    return RedirectResponse("/admin/users", status_code=303)


@page_router.post("/admin/users/{user_id}/roles")
def set_roles_from_page(
    user_id: DbId,
    form: FormDep,
    who: AdminUser,
    session: SessionDep,
    now: NowDep,
    state: SessionStateDep,
) -> Response:
    user = _user_or_404(session, user_id)
    try:
        roles = [Role(r) for r in form.getlist("roles") if isinstance(r, str)]
    except ValueError:
        state.flash("Unknown role.", "error")
        return RedirectResponse("/admin/users", status_code=303)
    return _admin_change(
        state,
        session,
        lambda: service.set_roles(
            session=session, user=user, roles=roles, actor=_actor(who), now=now
        ),
        f"Roles of {user.username}: {', '.join(r.value for r in roles) or 'none'}.",
    )


@page_router.post("/admin/users/{user_id}/active")
def set_active_from_page(
    user_id: DbId,
    form: FormDep,
    who: AdminUser,
    session: SessionDep,
    now: NowDep,
    state: SessionStateDep,
) -> Response:
    user = _user_or_404(session, user_id)
    active = form_text(form, "active") == "1"
    return _admin_change(
        state,
        session,
        lambda: service.set_active(
            session=session, user=user, active=active, actor=_actor(who), now=now
        ),
        f"{user.username} is {'active' if active else 'deactivated'}.",
    )


@page_router.post("/admin/users/{user_id}/password")
def set_password_from_page(
    user_id: DbId,
    form: FormDep,
    who: AdminUser,
    session: SessionDep,
    now: NowDep,
    app: AppStateDep,
    state: SessionStateDep,
) -> Response:
    user = _user_or_404(session, user_id)
    password = form_text(form, "password")
    return _admin_change(
        state,
        session,
        lambda: service.set_password(
            session=session,
            passwords=app.passwords,
            user=user,
            password=password,
            actor=_actor(who),
            now=now,
        ),
        f"Password of {user.username} is set; their sessions are signed out.",
    )
