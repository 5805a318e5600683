"""The console's link to the station daemon's local API (loopback only).

HTTP calls go through ``httpx``; the live streams (status events, camera
previews) through ``websockets``. The station answers errors as JSON
``{"detail": ..., "field": ...}``; they are turned into the web app's error
shapes here, with the station's status code kept where it means something
to the operator (404 no work, 409 wrong state, 422 a bad log, 503 the policy
failed its pre-flight) and 502 when the station itself failed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import HTTPException, status
from websockets.asyncio.client import ClientConnection, connect

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
    def __init__(self, base: str, why: str) -> None:
        super().__init__(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"the station is not answering at {base} ({why}); is `proctor station run` running?",
        )


@dataclass(frozen=True)
class StationLink:
    base: str  # http://127.0.0.1:8100 (validated loopback by the settings)

    @property
    def ws_base(self) -> str:
        return "ws://" + self.base.removeprefix("http://")

    async def call(
        self, method: str, path: str, *, json: Any = None, timeout: float = QUICK_S
    ) -> httpx.Response:
        """One request; a refused connection or a timeout is a 503, a station
        error is relayed (see ``raise_for_station``)."""
        try:
            async with httpx.AsyncClient(base_url=self.base, timeout=timeout) as client:
                response = await client.request(method, path, json=json)
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
            self.ws_base + path, open_timeout=QUICK_S, max_size=MAX_FRAME, compression=None
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
