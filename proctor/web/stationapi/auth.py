"""Who is calling the station API: a station, proven by its own token.

Every route of the station API depends on ``CallingStation``. A missing,
malformed, unknown, revoked or expired token is 401 with one message (the
caller cannot and need not tell which); a web user's API token (``prt_…``)
is not a station token and is refused the same way, and a station token is
never a web user's credential (``proctor.web.deps.resolve_principal`` knows
only ``prt_`` tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import sqlalchemy as sa
from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from proctor.core import station_credentials
from proctor.core.db.models import Station
from proctor.web.deps import NowDep, SessionDep

_REFUSED = "a live station token is required (Authorization: Bearer pst_…)"

# A security scheme of its own, so that the OpenAPI document says which
# operations take a station's token (and /api/docs can send one); it is not
# the user API's ``HTTPBearer`` (``prt_`` tokens). auto_error=False: a missing
# or non-bearer header gets this module's own 401, the same as a bad token.
_station_bearer = HTTPBearer(
    scheme_name="stationToken",
    auto_error=False,
    description="A station's own token, `Bearer pst_…`, shown once when an admin "
    "enrols the station or rotates its token (`proctor station enrol NAME`, "
    "`proctor station token rotate NAME`, or `POST /api/stations`). "
    "A user's API token (`prt_…`) is refused here.",
)


@dataclass(frozen=True)
class StationCaller:
    station_id: int
    name: str
    token_id: int


def calling_station(
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_station_bearer)],
    session: SessionDep,
    now: NowDep,
) -> StationCaller:
    if bearer is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, _REFUSED, headers={"WWW-Authenticate": "Bearer"}
        )
    live = station_credentials.live_token(session, bearer.credentials, now=now)
    if live is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, _REFUSED, headers={"WWW-Authenticate": "Bearer"}
        )
    name = session.scalar(sa.select(Station.name).where(Station.id == live.station_id))
    assert name is not None  # a token row always has its station (foreign key)
    station_credentials.record_use(session, live.id, now=now)
    return StationCaller(station_id=live.station_id, name=name, token_id=live.id)


CallingStation = Annotated[StationCaller, Depends(calling_station)]
