"""What one request may take from the server: a place among the requests in
flight, a request body of a bounded size, a database connection for a
bounded wait.

The deadlock these limits prevent: every request holds a pooled connection
from its first query until its session closes, and the session's teardown
runs in a later hop through the worker threads than the route itself. With
more requests in flight than connections, every worker thread ended up
waiting for a connection held by a request that was itself waiting for a
thread, until the pool's 30 s timeout broke the cycle with a 500; static
files and ``/api/health`` need a thread too, so the whole site stopped.

So: at most ``web.max_concurrent_requests`` requests are admitted at once
(the next ``web.admission_queue`` wait their turn in order for at most
``web.admission_wait_s``, the rest and those that waited that long get 503
with Retry-After); the pool holds that many
connections plus ``POOL_HEADROOM`` (a token's ``last_used_at`` touch, the
gateway, background workers), so an admitted request never waits for a
connection; the worker threads number that many plus ``THREAD_HEADROOM``
(static files, which are not counted), so it never waits long for a thread;
and if a checkout waits anyway, it gives up after ``web.db_pool_timeout_s``
and the answer is 503, not 500. ``/api/health`` and static files are not
counted: health checks the database on a connection of its own
(``proctor/web/system/routes.py``), and a file needs no connection.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import sqlalchemy as sa
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proctor.core.db.engine import server_pool
from proctor.core.settings import WebSettings

log = logging.getLogger(__name__)

# connections beyond one per admitted request: a token's last_used_at touch (its own
# short transaction inside a request), the policy gateway's lookups, background workers
POOL_HEADROOM = 16
# worker threads beyond one per admitted request: static files (not admitted, each a
# moment's stat and read) and anything else that runs outside the count
THREAD_HEADROOM = 16
RETRY_AFTER_S = 1

# answered without being counted: neither needs a pooled connection (proctor/web/system/routes.py)
HEALTH_PATH = "/api/health"
STATIC_PREFIX = "/static/"


def is_uncounted(path: str) -> bool:
    return path == HEALTH_PATH or path.startswith(STATIC_PREFIX)


def engine_options(web: WebSettings) -> dict[str, Any]:
    """The web app's pool: one connection per admitted request and headroom."""
    return server_pool(
        connections=web.max_concurrent_requests,
        overflow=POOL_HEADROOM,
        timeout_s=web.db_pool_timeout_s,
    )


def size_worker_threads(web: WebSettings) -> None:
    """Give the running event loop's default thread limiter (anyio's, 40 by
    default, shared by sync routes and dependencies, ``run_in_threadpool`` and
    static files) one thread per admitted request and headroom. Call it from
    the app's lifespan: the limiter belongs to the loop."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    limiter.total_tokens = web.max_concurrent_requests + THREAD_HEADROOM


def _is_api(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")


async def _refuse(
    scope: Scope, receive: Receive, send: Send, status: int, detail: str, headers: dict[str, str]
) -> None:
    # answered before the app sees the request: JSON under /api (as proctor.web.errors
    # answers), one line of text for pages
    response: Response
    if _is_api(scope["path"]):
        response = JSONResponse({"detail": detail}, status_code=status, headers=headers)
    else:
        response = Response(detail + "\n", status, headers=headers, media_type="text/plain")
    await response(scope, receive, send)


class ConcurrencyLimitMiddleware:
    """Admits at most ``limit`` HTTP requests at once. The next ``queue``
    wait for a place, first come first served, at most ``wait_s`` each; the
    rest, and those that waited that long, are answered 503 with Retry-After
    without their bodies being read. A finishing request hands its place
    straight to the first in line, so a newcomer cannot overtake the queue.
    WebSockets (the policy gateway, the console's feeds) are not counted:
    they are few, long-lived and authenticated."""

    def __init__(self, app: ASGIApp, *, limit: int, queue: int = 0, wait_s: float = 0.0) -> None:
        self.app = app
        self.limit = limit
        self.queue = queue
        self.wait_s = wait_s
        self.in_flight = 0
        self.waiting: deque[asyncio.Future[None]] = deque()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_uncounted(scope["path"]):
            await self.app(scope, receive, send)
            return
        # one event loop: nothing runs between a test and its increment
        if self.in_flight < self.limit and not self.waiting:
            self.in_flight += 1
        elif not await self._wait_for_a_place():
            await _refuse(
                scope,
                receive,
                send,
                503,
                "the server is busy: try again in a moment",
                {"retry-after": str(RETRY_AFTER_S)},
            )
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._release()

    async def _wait_for_a_place(self) -> bool:
        """True once a finishing request has handed this one its place."""
        if len(self.waiting) >= self.queue or self.wait_s <= 0:
            return False
        place: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(place)
        try:
            await asyncio.wait_for(asyncio.shield(place), self.wait_s)
        except TimeoutError:
            pass
        except BaseException:
            # the client went away while it waited: a place handed over meanwhile goes on
            self._give_up(place)
            raise
        if place.done():
            return True  # handed over, even if at the very moment the wait ran out
        self._give_up(place)
        return False

    def _give_up(self, place: asyncio.Future[None]) -> None:
        if place.done():
            self._release()  # it was handed this place: pass it on
        else:
            self.waiting.remove(place)
            place.cancel()

    def _release(self) -> None:
        """A place comes free: to the first in line, else back to the pool."""
        while self.waiting:
            place = self.waiting.popleft()
            if not place.done():
                place.set_result(None)  # in_flight stays: the place changes hands
                return
        self.in_flight -= 1


@dataclass(frozen=True)
class BodyLimit:
    """Requests matching ``method`` and ``path`` may carry a body of up to
    ``limit(web)`` bytes instead of ``web.max_body_bytes``."""

    method: str
    path: re.Pattern[str]
    limit: Callable[[WebSettings], int]
    what: str


# the routes whose bodies may be larger than a JSON document or a form
BODY_LIMITS: tuple[BodyLimit, ...] = (
    BodyLimit(
        "PUT",
        re.compile(r"^/api/uploads/[^/]+$"),
        lambda web: web.max_upload_chunk_bytes,
        "an upload chunk",
    ),
    # a station's artifact part through this server (a local store); the route
    # itself, once the station's token is checked, reads no more than the
    # upload's own part length (proctor.web.stationapi.uploads), and settings
    # keep scheduler.upload_part_bytes within this
    BodyLimit(
        "PUT",
        re.compile(r"^/api/station/v1/uploads/[^/]+/parts/[0-9]+$"),
        lambda web: web.max_upload_chunk_bytes,
        "an artifact part",
    ),
)


def _size(n: int) -> str:
    if n >= 2**20 and n % 2**20 == 0:
        return f"{n // 2**20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} bytes"


class BodyLimitMiddleware:
    """Bounds request bodies before anything parses them (FastAPI reads and
    decodes a JSON body before it resolves the caller, so an anonymous client
    could otherwise make the server hold and parse any amount).

    A declared Content-Length over the limit is answered 413 at once, unread.
    A body without one (chunked) is counted as it streams in, and reading
    stops with a 413 as soon as it passes the limit."""

    def __init__(self, app: ASGIApp, *, web: WebSettings) -> None:
        self.app = app
        self.default = web.max_body_bytes
        self.rules = [(rule, rule.limit(web)) for rule in BODY_LIMITS]

    def _limit_for(self, method: str, path: str) -> tuple[int, str]:
        for rule, limit in self.rules:
            if rule.method == method and rule.path.match(path):
                return limit, rule.what
        return self.default, "this request"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, what = self._limit_for(scope["method"], scope["path"])
        detail = f"request body: {what} may carry at most {_size(limit)}"
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _refuse(
                scope,
                receive,
                send,
                413,
                f"{detail}, not {declared} bytes",
                {"connection": "close"},
            )
            return
        received = 0

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # raised inside the route's own call, so the app's error
                    # handlers answer it (FastAPI re-raises HTTPExceptions from
                    # body reading); nothing more is read
                    raise HTTPException(413, detail, headers={"connection": "close"})
            return message

        await self.app(scope, counted_receive, send)


def _pool_exhausted(request: Request, exc: Exception) -> Response:
    log.warning("no database connection for %s %s: %s", request.method, request.url.path, exc)
    detail = "the server is busy: try again in a moment"
    headers = {"Retry-After": str(RETRY_AFTER_S)}
    if _is_api(request.url.path):
        return JSONResponse({"detail": detail}, status_code=503, headers=headers)
    return Response(detail + "\n", 503, headers=headers, media_type="text/plain")


def install_limits(app: FastAPI, web: WebSettings) -> None:
    """The limits as middleware (call before the security headers are added,
    so that their answers carry them too) and the pool timeout as a 503."""
    app.add_exception_handler(sa.exc.TimeoutError, _pool_exhausted)
    app.add_middleware(
        ConcurrencyLimitMiddleware,
        limit=web.max_concurrent_requests,
        queue=web.admission_queue,
        wait_s=web.admission_wait_s,
    )
    # outside the admission count: an oversized body is refused without taking a place
    app.add_middleware(BodyLimitMiddleware, web=web)
