"""Errors: JSON for the API (``{"detail": ...}``), HTML pages for people.

A request is an API request when its path starts with ``/api/``. Services
raise ``proctor.core.errors`` exceptions (``NotFound``, ``Forbidden``,
``Conflict``, ``FieldError`` …), each carrying its HTTP status and, for bad
input, its field; routes may raise ``HTTPException``. The handlers here turn
each into the right response:

* 401 on a page: a redirect to the sign-in page, coming back afterwards;
* 422 names the field: the API's ``detail`` is FastAPI's list of
  ``{"loc": [...], "msg": ..., "type": ...}``, the page lists "field: message";
* anything unexpected: 500, logged with its traceback, no details leaked;
* a WebSocket handshake on a path nobody serves: 404, like any unknown path.
"""

from __future__ import annotations

import logging
import math
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

from proctor.core.errors import ProctorError, http_answer
from proctor.web.auth.identity import NotSignedIn
from proctor.web.templating import render

log = logging.getLogger(__name__)

TITLES = {
    400: "Bad request",
    401: "Sign-in required",
    403: "Not allowed",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Too large",
    422: "Invalid input",
    429: "Too many requests",
    500: "Something went wrong",
    501: "Not available yet",
    503: "Unavailable",
    507: "Insufficient storage",
}


class ErrorOut(BaseModel):
    detail: str


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the errors a router's routes may answer with:
    ``APIRouter(responses=error_responses(401, 403, 404))``."""
    return {code: {"model": ErrorOut, "description": TITLES.get(code, "Error")} for code in codes}


def is_api(request: Request) -> bool:
    path = request.url.path
    return path == "/api" or path.startswith("/api/")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(ProctorError, _proctor_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _server_error)
    app.router.default = _websocket_not_found(app.router.default)
    _quiet_denied_handshakes()


# what uvicorn's websockets-sansio protocol logs, at ERROR, when an app returns
# after a denial response: it never marks that handshake complete (uvicorn PR
# #3138, open). Dropped only for the handshakes ``_websocket_not_found`` denied
# (the record is logged in the task that ran the app, so it sees the flag).
_INCOMPLETE_HANDSHAKE = "ASGI callable returned without completing handshake."
_DENIED_HANDSHAKE: ContextVar[bool] = ContextVar("proctor_denied_handshake", default=False)


class _DeniedHandshakeFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (_DENIED_HANDSHAKE.get() and record.getMessage() == _INCOMPLETE_HANDSHAKE)


def _quiet_denied_handshakes() -> None:
    server_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DeniedHandshakeFilter) for f in server_log.filters):
        server_log.addFilter(_DeniedHandshakeFilter())


def _websocket_not_found(http_not_found: ASGIApp) -> ASGIApp:
    """The router's answer to a path it does not serve, a WebSocket handshake
    included. Starlette closes such a handshake before accepting it, which the
    server sends as 403: the same as a route that refused the caller, so a
    prober could tell a served WebSocket path (the gateway's) from nothing at
    all, on the console host too. This answers 404, as an unknown HTTP path
    gets, where the server can send an HTTP answer to a handshake (the ASGI
    ``websocket.http.response`` extension: uvicorn's, the test client's)."""

    async def not_found(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            if "websocket.http.response" in scope.get("extensions", {}):
                _DENIED_HANDSHAKE.set(True)
                await JSONResponse({"detail": "Not Found"}, 404)(scope, receive, send)
            else:  # a server without the extension: the close (403) is all there is
                await WebSocketClose()(scope, receive, send)
            return
        await http_not_found(scope, receive, send)

    return not_found


def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    headers = dict(exc.headers or {})
    if is_api(request):
        return JSONResponse({"detail": exc.detail}, exc.status_code, headers=headers)
    if isinstance(exc, NotSignedIn) and request.method in ("GET", "HEAD"):
        query = {"next": _path_with_query(request)}
        if exc.expired:
            query["expired"] = "1"
        return RedirectResponse(f"/login?{urlencode(query)}", status_code=303)
    headers.pop("WWW-Authenticate", None)
    return error_page(request, exc.status_code, str(exc.detail), headers=headers)


def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    errors = exc.errors()
    if is_api(request):
        return JSONResponse({"detail": [_public_error(e) for e in errors]}, status_code=422)
    lines = [f"{_field_name(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors]
    return error_page(request, 422, "; ".join(lines) or "invalid input")


def _public_error(error: Any) -> dict[str, Any]:
    """One validation error as the API answers it: where, what, which kind.
    The rejected ``input`` is never echoed (it is the caller's own bytes, may
    be large or secret, and a NaN or Infinity in it cannot be written as
    JSON: that was a 500); ``ctx`` (the limits, e.g. ``{"ge": 0}``) is kept,
    with anything that is not a finite JSON scalar written as text."""
    out: dict[str, Any] = {
        "loc": list(error.get("loc", ())),
        "msg": str(error.get("msg", "invalid")),
        "type": str(error.get("type", "value_error")),
    }
    ctx = error.get("ctx")
    if isinstance(ctx, dict):
        out["ctx"] = {str(k): _json_scalar(v) for k, v in ctx.items()}
    return out


def _json_scalar(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return str(value)


def _proctor_error(request: Request, exc: ProctorError) -> Response:
    """Every service error, answered from what the exception carries: its
    status, its field (bad input), its headers (``Retry-After``)."""
    answer = http_answer(exc)
    if answer.status == 500:
        log.error("%s on %s: %s", type(exc).__name__, request.url.path, exc)
    if not is_api(request):
        return error_page(request, answer.status, answer.detail, headers=answer.headers or None)
    detail: Any = answer.detail
    if answer.field is not None:
        # the same shape as FastAPI's own validation errors
        detail = [
            {"loc": ["body", answer.field], "msg": answer.field_message, "type": "value_error"}
        ]
    return JSONResponse({"detail": detail}, status_code=answer.status, headers=answer.headers)


def _server_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    if is_api(request):
        return JSONResponse({"detail": "internal server error"}, status_code=500)
    return error_page(request, 500, "The server hit an unexpected error; it has been logged.")


def error_page(
    request: Request, status: int, message: str, *, headers: dict[str, str] | None = None
) -> Response:
    return render(
        request,
        "error.html",
        {"status": status, "title": TITLES.get(status, "Error"), "message": message},
        status_code=status,
        headers=headers,
    )


def _field_name(loc: Any) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "form")]
    return ".".join(parts) or "request"


def _path_with_query(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")
