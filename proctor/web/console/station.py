"""The console's link to the station daemon's local API (loopback only).

HTTP calls go through ``httpx``; the live streams (status events, camera
previews) through ``websockets``. Every call carries the host's station key
(``X-Proctor-Station-Key``, read from ``settings.station_key_file``, the 0600
file the daemon makes), without which the daemon answers nothing; a key file
that is missing or that others can read is a 503 that names the file. The
station answers errors as JSON
``{"detail": ..., "field": ...}``; they are turned into the web app's error
shapes here, with the station's status code kept where it means something
to the operator (404 no work, 409 wrong state, 422 a bad log, 503 the policy
failed its pre-flight) and 502 when the station itself failed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import HTTPException, status
from websockets.asyncio.client import ClientConnection, connect

from proctor.core.errors import ConfigError
from proctor.core.station_key import HEADER, KeyFileMissing, read_station_key

# how long each kind of call may take: arming homes the arm and runs the
# policy's pre-flight (its connect timeout is 10 s by default)
SLOW_S = 60.0
QUICK_S = 10.0
# a safety stop that takes longer than this has failed: say so at once
SAFETY_S = 3.0
# the largest preview frame relayed (a 640×480 JPEG is ~50 kB)
MAX_FRAME = 8 << 20
# station errors whose status code the operator should see as is
RELAYED = {404, 409, 422, 503}


class StationUnreachable(HTTPException):
    def __init__(self, base: str, why: str, *, detail: str | None = None) -> None:
        super().__init__(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            detail
            or f"the station is not answering at {base} ({why}); is `proctor station run` running?",
        )


class StationKeyUnreadable(StationUnreachable):
    """The key file cannot be used: the console cannot reach the station."""

    def __init__(self, base: str, problem: ConfigError) -> None:
        super().__init__(base, "", detail=f"the console cannot call the station: {problem}")


@dataclass(frozen=True)
class StationLink:
    base: str  # http://127.0.0.1:8100 (validated loopback by the settings)
    key_file: Path  # settings.station_key_file: the key the daemon made

    def headers(self) -> dict[str, str]:
        """The station key's header, read from its file on every call (the daemon
        may make it after the console started; the file is a few bytes)."""
        try:
            return {HEADER: read_station_key(self.key_file)}
        except KeyFileMissing:
            # the daemon makes it on its first start: it has never run here
            raise StationUnreachable(
                self.base, f"no station key file {self.key_file} yet"
            ) from None
        except ConfigError as exc:
            raise StationKeyUnreadable(self.base, exc) from None

    @property
    def ws_base(self) -> str:
        return "ws://" + self.base.removeprefix("http://")

    async def call(
        self, method: str, path: str, *, json: Any = None, timeout: float = QUICK_S
    ) -> httpx.Response:
        """One request; a refused connection or a timeout is a 503, a station
        error is relayed (see ``raise_for_station``)."""
        headers = self.headers()
        try:
            async with httpx.AsyncClient(base_url=self.base, timeout=timeout) as client:
                response = await client.request(method, path, json=json, headers=headers)
        except httpx.TimeoutException:
            raise StationUnreachable(self.base, f"no answer within {timeout:g} s") from None
        except httpx.TransportError as exc:
            raise StationUnreachable(self.base, _why(exc)) from None
        raise_for_station(response)
        return response

    async def json(
        self, method: str, path: str, *, json: Any = None, timeout: float = QUICK_S
    ) -> Any:
        response = await self.call(method, path, json=json, timeout=timeout)
        try:
            return response.json()
        except ValueError:
            raise HTTPException(
                status.HTTP_502_BAD_GATEWAY, "the station answered something that is not JSON"
            ) from None

    @contextlib.asynccontextmanager
    async def stream(self, path: str) -> AsyncIterator[ClientConnection]:
        """A WebSocket to the station (``/api/events``, ``/api/preview/{camera}``)."""
        async with connect(
            self.ws_base + path,
            additional_headers=self.headers(),
            open_timeout=QUICK_S,
            max_size=MAX_FRAME,
            compression=None,
        ) as ws:
            yield ws


def _why(exc: httpx.TransportError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused"
    return type(exc).__name__


def raise_for_station(response: httpx.Response) -> None:
    """Turn a station error into the web app's: 422 as a list of
    ``{"loc": ["body", field], "msg", "type"}`` (the shape every form reads),
    others as ``{"detail": text}``."""
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except ValueError:
        body = {}
    detail = body.get("detail") if isinstance(body, dict) else None
    text = detail if isinstance(detail, str) else f"HTTP {response.status_code}"
    code = response.status_code
    if code == 422:
        field = body.get("field") if isinstance(body, dict) else None
        message = text
        if isinstance(field, str) and text.startswith(field + ":"):
            message = text[len(field) + 1 :].strip()
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": ["body", field or "body"], "msg": message, "type": "value_error"}],
        )
    if code in RELAYED:
        raise HTTPException(code, text)
    raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"the station failed (HTTP {code}): {text}")
