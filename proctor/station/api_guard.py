"""Who may call the station daemon's local API: the operator console alone.

The API moves the arm and writes official results, and it listens on
loopback, where every process of the host and every web page in a browser on
it can reach it. One ASGI middleware wraps the whole app, HTTP and WebSocket
alike, so no route (nor a route added later) can be reached around it. A
request passes only if:

- it carries no ``Origin`` and no ``Sec-Fetch-Site`` header: browsers add them
  to every cross-site request and WebSocket handshake, and the console (a
  server-side client) never sends them;
- its ``Host`` is the daemon's own loopback address and bound port
  (``127.0.0.1:<port>``, ``localhost:<port>``, ``[::1]:<port>``): a name an
  attacker's DNS points at 127.0.0.1 (DNS rebinding) is refused;
- it carries the host's station key (``proctor.core.station_key``) in
  ``X-Proctor-Station-Key``, compared in constant time;
- a body, if it has one, is ``application/json``: a cross-site "simple"
  ``text/plain`` POST is not read as JSON.

A refusal is JSON ``{"detail", "field"}`` naming the header that failed, 401
for the key and 403 or 415 for the rest; on a WebSocket, the same answer in
place of the handshake (or a 1008 close where the server cannot send one).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from proctor.core.station_key import HEADER, key_matches

log = logging.getLogger(__name__)

# the names a loopback client may put in Host (the daemon binds loopback only)
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
# headers only a browser sends: any of them marks a request from a web page
BROWSER_HEADERS = ("origin", "sec-fetch-site")
JSON_TYPE = "application/json"


@dataclass(frozen=True)
class Refusal:
    status: int
    field: str
    detail: str


def refusal(scope: Scope, key: str, names: frozenset[str]) -> Refusal | None:
    """Why this request may not reach the API, or None if it may."""
    headers = Headers(scope=scope)
    for name in BROWSER_HEADERS:
        if name in headers:
            return Refusal(
                403,
                name,
                f"{name}: the station's API takes no requests from web pages; "
                "the operator console is the way in",
            )
    host_problem = _host_problem(headers.getlist("host"), scope.get("server"), names)
    if host_problem is not None:
        return Refusal(403, "host", f"host: {host_problem}")
    field = HEADER.lower()
    given = headers.getlist(field)
    if not given:
        return Refusal(
            401, field, f"{field}: missing; the station's API answers the operator console only"
        )
    if len(given) > 1 or not key_matches(given[0], key):
        return Refusal(401, field, f"{field}: not this station host's key")
    if _has_body(headers):
        media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != JSON_TYPE:
            return Refusal(
                415,
                "content-type",
                f"content-type: must be {JSON_TYPE}, got {media or 'none'!r}",
            )
    return None


def _has_body(headers: Headers) -> bool:
    # a declared type counts too: a bodiless text/plain POST is a browser's "simple" request
    length = headers.get("content-length", "0").strip()
    return "transfer-encoding" in headers or "content-type" in headers or length != "0"


def _host_problem(
    values: list[str], server: tuple[str, int | None] | None, names: frozenset[str]
) -> str | None:
    if len(values) != 1:
        return "expected exactly one Host header"
    raw = values[0].strip().lower()
    if raw.startswith("["):  # [::1]:8100
        inside, _, rest = raw.partition("]")
        name, port = inside + "]", rest.removeprefix(":") if rest else "80"
    else:  # 127.0.0.1:8100, localhost (port 80)
        name, colon, port = raw.partition(":")
        port = port if colon else "80"
    bound = server[1] if server else None
    if name not in names or not port.isdigit() or (bound is not None and int(port) != bound):
        return (
            f"{values[0][:100]!r} is not this station's address; use "
            f"127.0.0.1:{bound if bound is not None else '<port>'}"
        )
    return None


def allowed_names(configured_host: str) -> frozenset[str]:
    """The Host names the daemon answers to: loopback's, and the address it is
    configured to bind if that is a single one of its own."""
    extra: Iterable[str] = ()
    host = configured_host.strip().lower()
    if host and host not in ("0.0.0.0", "::", "[::]"):
        extra = (f"[{host}]" if ":" in host and not host.startswith("[") else host,)
    return LOOPBACK_NAMES | frozenset(extra)


class StationApiGuard:
    """The ASGI middleware: every HTTP request and WebSocket handshake is
    checked by ``refusal`` before the app sees it."""

    def __init__(self, app: ASGIApp, *, key: str, names: frozenset[str] = LOOPBACK_NAMES) -> None:
        self.app = app
        self.key = key
        self.names = names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        why = refusal(scope, self.key, self.names)
        if why is None:
            await self.app(scope, receive, send)
            return
        # the path and the failed header only: never a header's value
        log.info("local API refused %s %s: %s", scope["type"], scope.get("path"), why.field)
        answer = JSONResponse({"detail": why.detail, "field": why.field}, status_code=why.status)
        if scope["type"] == "http":
            await answer(scope, receive, send)
            return
        ws = WebSocket(scope, receive, send)
        if "websocket.http.response" in scope.get("extensions", {}):
            await ws.send_denial_response(answer)
        else:
            await ws.close(code=1008, reason=why.detail[:120])
