"""Stations' credentials, the admin's JSON API (``/api/stations``): the same
actions as ``proctor station enrol`` and ``proctor station token``
(``proctor.core.station_credentials``). Admins only; minting a token from a
page session needs a recent sign-in, as a user's API token does. A token is
in the response once, marked ``no-store``; the database keeps its hash."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field, field_validator

from proctor.core import station_credentials
from proctor.core.audit import Actor
from proctor.core.domain import Role, StationProfile
from proctor.web.accounts.routes import NO_STORE, check_recent_sign_in
from proctor.web.auth.identity import Principal
from proctor.web.deps import AppStateDep, NowDep, SessionDep, SessionStateDep, require_role
from proctor.web.errors import error_responses

api_router = APIRouter(tags=["stations"], responses=error_responses(401, 403, 404, 409))
AdminUser = Annotated[Principal, require_role(Role.admin)]


class EnrolIn(BaseModel):
    model_config = {"extra": "forbid"}

    name: str = Field(min_length=1, max_length=station_credentials.NAME_MAX)
    profile: str = "real"

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        known = sorted(p.value for p in StationProfile)
        if value not in known:
            raise ValueError(f"'{value}' is not one of {', '.join(known)}")
        return value


class RotateIn(BaseModel):
    model_config = {"extra": "forbid"}

    window_hours: float = Field(
        default=station_credentials.DEFAULT_ROTATION_WINDOW.total_seconds() / 3600,
        ge=0,
        le=station_credentials.MAX_ROTATION_WINDOW.total_seconds() / 3600,
    )


class IssuedOut(BaseModel):
    station: str
    prefix: str
    token: str  # shown once: PROCTOR_STATION_TOKEN on the station host
    old_tokens_expire_at: datetime | None


class StationTokenOut(BaseModel):
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None
    live: bool


class RevokedOut(BaseModel):
    station: str
    revoked: list[str]


def _actor(who: Principal) -> Actor:
    return Actor(user_id=who.id, label=who.username)


def _issued(issued: station_credentials.IssuedToken, response: Response) -> IssuedOut:
    response.headers.update(NO_STORE)
    return IssuedOut(
        station=issued.station_name,
        prefix=issued.prefix,
        token=issued.token,
        old_tokens_expire_at=issued.old_tokens_expire_at,
    )


@api_router.post(
    "/stations",
    status_code=201,
    summary="Enrol a station and issue its token (the response is the only time it is shown)",
)
def enrol_station(
    body: EnrolIn,
    who: AdminUser,
    session: SessionDep,
    now: NowDep,
    response: Response,
    app: AppStateDep,
    state: SessionStateDep,
) -> IssuedOut:
    check_recent_sign_in(who, state, app, now)
    issued = station_credentials.enrol(
        session, name=body.name, profile=body.profile, actor=_actor(who), now=now
    )
    return _issued(issued, response)


@api_router.post(
    "/stations/{name}/tokens",
    status_code=201,
    summary="Rotate: a new token; the station's current ones stay valid for the window",
)
def rotate_station_token(
    name: str,
    body: RotateIn,
    who: AdminUser,
    session: SessionDep,
    now: NowDep,
    response: Response,
    app: AppStateDep,
    state: SessionStateDep,
) -> IssuedOut:
    check_recent_sign_in(who, state, app, now)
    issued = station_credentials.rotate(
        session,
        name=name,
        window=timedelta(hours=body.window_hours),
        actor=_actor(who),
        now=now,
    )
    return _issued(issued, response)


@api_router.get("/stations/{name}/tokens", summary="A station's tokens (never the tokens)")
def station_tokens(
    name: str, who: AdminUser, session: SessionDep, now: NowDep
) -> list[StationTokenOut]:
    return [
        StationTokenOut(**vars(t))
        for t in station_credentials.tokens_of(session, name=name, now=now)
    ]


@api_router.delete("/stations/{name}/tokens", summary="Revoke a station's tokens now")
def revoke_station_tokens(
    name: str,
    who: AdminUser,
    session: SessionDep,
    now: NowDep,
    prefix: Annotated[str | None, Query(max_length=16)] = None,
) -> RevokedOut:
    revoked = station_credentials.revoke(
        session, name=name, prefix=prefix, actor=_actor(who), now=now
    )
    return RevokedOut(station=name, revoked=revoked)
