"""Errors: JSON for the API (``{"detail": ...}``), HTML pages for people.

A request is an API request when its path starts with ``/api/``. Services
raise ``proctor.core.errors`` exceptions (``NotFound``, ``Forbidden``,
``Conflict``, ``FieldError`` …), each carrying its HTTP status and, for bad
input, its field; routes may raise ``HTTPException``. The handlers here turn
each into the right response:

* 401 on a page: a redirect to the sign-in page, coming back afterwards;
* 422 names the field: the API's ``detail`` is FastAPI's list of
  ``{"loc": [...], "msg": ..., "type": ...}``, the page lists "field: message";
* anything unexpected: 500, logged with its traceback, no details leaked.
"""

from __future__ import annotations

import logging
import math
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

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
