"""The dependencies every route uses, as ``Annotated`` aliases.

    from proctor.web.deps import CurrentUser, SessionDep, require_role

    @api_router.post("/things", status_code=201)
    def create_thing(body: ThingIn, session: SessionDep,
                     who: Annotated[Principal, require_role(Role.submitter)]) -> ThingOut: ...

* ``SessionDep``: the request's database session. One transaction per
  request: committed after the route returns (before the response is sent,
  so a failed commit is a 500, never a lost write), rolled back if it raises.
  Services take it as ``session=`` and never commit.
* ``OptionalUser`` / ``CurrentUser``: the ``Principal`` making the request
  (API token or signed-in session), or None / 401.
* ``require_role(Role.x, ...)``: 403 unless the caller holds one of the roles
  (no role implies another: list ``Role.admin`` where admins should pass).
* ``CsrfProtected``: for form posts that need no sign-in (the login form).
  Signed-in cookie requests that change anything are CSRF-checked already
  when they resolve the user.
* ``SettingsDep``, ``StoreDep`` (artifact store), ``NowDep`` (the app clock's
  time for this request: use it instead of reading the wall clock).
* ``ResultsDep``, ``ArtifactCacheDep``: the app's own caches (``proctor.web.state``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import Depends, Path, Request
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import FormData

from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import ApiToken
from proctor.core.domain import Role
from proctor.core.errors import Forbidden
from proctor.core.settings import Settings
from proctor.web.artifacts.service import ArtifactCache
from proctor.web.auth.identity import (
    SAFE_METHODS,
    NotSignedIn,
    Principal,
    principal_from_session,
    principal_from_token,
    token_needs_touch,
)
from proctor.web.auth.sessions import SCOPE_KEY, SESSION_COOKIE, SessionState
from proctor.web.snapshots.service import ResultCache
from proctor.web.state import AppState

CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"


def get_app_state(request: Request) -> AppState:
    return request.app.state.web


AppStateDep = Annotated[AppState, Depends(get_app_state)]


def get_settings(state: AppStateDep) -> Settings:
    return state.settings


def get_store(state: AppStateDep) -> ArtifactStore:
    return state.store


def request_time(request: Request, state: AppStateDep) -> datetime:
    # one reading per request, so that everything it writes agrees
    if not hasattr(request.state, "now"):
        request.state.now = state.clock()
    return request.state.now


# async: handing back an attribute needs no worker thread
async def get_results(request: Request) -> ResultCache:
    return request.app.state.web.results


async def get_artifact_cache(request: Request) -> ArtifactCache:
    return request.app.state.web.artifact_cache


def get_db_session(state: AppStateDep) -> Iterator[ProctorSession]:
    session = state.session_factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[ArtifactStore, Depends(get_store)]
NowDep = Annotated[datetime, Depends(request_time)]
ResultsDep = Annotated[ResultCache, Depends(get_results)]
ArtifactCacheDep = Annotated[ArtifactCache, Depends(get_artifact_cache)]
# scope="function": the commit runs when the route returns, before the
# response goes out (FastAPI's default would commit after sending it)
SessionDep = Annotated[ProctorSession, Depends(get_db_session, scope="function")]


def session_state(request: Request) -> SessionState:
    state = request.scope.get(SCOPE_KEY)
    if not isinstance(state, SessionState):
        raise RuntimeError("SessionCookieMiddleware is not installed")
    return state


SessionStateDep = Annotated[SessionState, Depends(session_state)]

# declared so that OpenAPI documents both ways in (and /api/docs can send a token)
_bearer = HTTPBearer(auto_error=False, description="An API token: `Bearer prt_…`")
_cookie = APIKeyCookie(
    name=SESSION_COOKIE, auto_error=False, description="The pages' signed session cookie"
)


async def submitted_csrf_token(request: Request) -> str | None:
    """The CSRF token a request carries: the X-CSRF-Token header, or the
    ``csrf_token`` field of a URL-encoded form. Multipart bodies are not
    parsed here (they may be multi-GB uploads): send the header."""
    if request.method in SAFE_METHODS:
        return None
    header = request.headers.get(CSRF_HEADER)
    if header:
        return header
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("application/x-www-form-urlencoded"):
        form = await request.form()
        value = form.get(CSRF_FIELD)
        return value if isinstance(value, str) else None
    return None


CSRF_FAILED = "CSRF token missing or invalid: reload the page and try again"


def resolve_principal(
    request: Request,
    db: SessionDep,
    app_state: AppStateDep,
    now: NowDep,
    state: SessionStateDep,
    csrf: Annotated[str | None, Depends(submitted_csrf_token)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    _cookie_doc: Annotated[str | None, Depends(_cookie)],
) -> Principal | None:
    """The caller, from an API token if the request has one, else from the
    session cookie. A bad token is refused outright (401); an expired session
    just means nobody is signed in."""
    if bearer is not None:
        principal, row = principal_from_token(
            session=db, token=bearer.credentials, method=request.method, now=now
        )
        if token_needs_touch(row, now):
            _touch_token(app_state, row.id, now)
    else:
        check = principal_from_session(
            session=db,
            state=state,
            web=app_state.settings.web,
            secret_key=app_state.secret_key,
            now=now,
        )
        request.state.session_expired = check.expired
        principal = check.principal
        if (
            principal is not None
            and request.method not in SAFE_METHODS
            and not state.csrf_matches(csrf)
        ):
            raise Forbidden(CSRF_FAILED)
    request.state.principal = principal
    return principal


def _touch_token(app_state: AppState, token_id: int, now: datetime) -> None:
    # its own short transaction: a token was used even if the request fails
    with app_state.session_factory.begin() as s:
        s.execute(sa.update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=now))


OptionalUser = Annotated[Principal | None, Depends(resolve_principal)]


def current_user(request: Request, principal: OptionalUser) -> Principal:
    if principal is None:
        if getattr(request.state, "session_expired", False):
            raise NotSignedIn("session expired: sign in again", expired=True)
        raise NotSignedIn()
    return principal


CurrentUser = Annotated[Principal, Depends(current_user)]


def require_role(*roles: Role) -> Any:
    """A dependency admitting callers that hold any of ``roles``. Use as
    ``who: Annotated[Principal, require_role(Role.admin)]`` or in a route's
    or router's ``dependencies=[...]``."""
    if not roles:
        raise ValueError("require_role needs at least one role")
    wanted = tuple(roles)
    names = " or ".join(r.value for r in wanted)

    def check_role(principal: CurrentUser) -> Principal:
        if not principal.has_role(*wanted):
            if (
                principal.via == "token"
                and principal.user.roles
                and any(r.role in wanted for r in principal.user.roles)
            ):
                raise Forbidden(f"this API token's scopes do not include the {names} role")
            raise Forbidden(f"this needs the {names} role")
        return principal

    check_role.__name__ = f"require_role_{'_'.join(r.value for r in wanted)}"
    return Depends(check_role)


def require_csrf(
    request: Request,
    state: SessionStateDep,
    csrf: Annotated[str | None, Depends(submitted_csrf_token)],
    db: SessionDep,
    now: NowDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    if request.method in SAFE_METHODS:
        return
    if bearer is not None:
        # a script with a token: no cookie, no cross-site forgery. Only a
        # token that authenticates skips the check: anything else is a 401
        principal_from_token(session=db, token=bearer.credentials, method=request.method, now=now)
        return
    if not state.csrf_matches(csrf):
        raise Forbidden(CSRF_FAILED)


CsrfProtected = Depends(require_csrf)


async def form_data(request: Request) -> FormData:
    """A page's URL-encoded form (parsed once; the CSRF check reuses it)."""
    return await request.form()


FormDep = Annotated[FormData, Depends(form_data)]


def form_text(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


# a database id in a path: bounded, so that a huge number is a 422, not a
# database overflow
DbId = Annotated[int, Path(ge=1, le=2**31 - 1)]
