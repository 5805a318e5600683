"""A shared cache in front of the app, for what the app itself calls public.

The result pages of a released campaign, seen by nobody in particular, are
answered ``cache-control: public, max-age=30`` with ``vary: cookie,
authorization`` (``proctor.web.leaderboard.caching``): any proxy may keep them. This
is that proxy, in the process: a request with no session cookie and no
``authorization`` header gets the stored bytes of the last such response for
the same path and query, without routing, middleware or a database query
(but for a one-row read of the cache generation at most every
``web.cache_check_s``, shared by all requests).

It keeps a response for ``min(max-age, web.shared_cache_s)`` seconds, and
forgets it as soon as the database's cache generation moves
(``proctor.core.db.generation``: every write through a ``ProctorSession``, in
any process, bumps it in the write's own transaction). Each app reads that
row at most every ``web.cache_check_s`` (0.5 s), and at once after a
writing commit through its own sessions (``LocalCommits``): a write through
the app shows at the next request, any other write (another ``proctor
serve`` worker, the CLI, a station, another app in this process) within
``cache_check_s`` plus the time of one read.
Only 200 responses with a length and no ``set-cookie`` are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proctor.core.db import generation
from proctor.core.db.engine import ProctorSession
from proctor.web.auth.sessions import SESSION_COOKIE

log = logging.getLogger(__name__)

MAX_ENTRIES = 512
MAX_BODY_BYTES = 2 * 1024 * 1024  # one response
MAX_TOTAL_BYTES = 64 * 1024 * 1024  # all of them: the least recently used go first
# how long a request waits for another one fetching the same response from the
# app before it goes to the app itself
FILL_WAIT_S = 10.0
_MAX_AGE = re.compile(r"max-age=(\d+)")


class LocalCommits:
    """Commits through one app's sessions that bumped the generation: a
    reason for that app's watcher to read the row again now rather than at
    the next interval. Each app owns one (``AppState.local_commits``), fed by
    a listener on the app's own session factory: a commit through another
    app's or the CLI's sessions in the same process counts as a write from
    another process."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def bump(self) -> None:
        with self._lock:
            self.value += 1

    def count_commits_of(self, session_factory: sessionmaker[ProctorSession]) -> None:
        """Count the writing commits of the sessions ``session_factory`` makes
        (an event on the factory reaches its sessions only)."""

        def after_commit(session: Session) -> None:
            if session.info.get(generation.BUMPED, False):
                self.bump()

        event.listen(session_factory, "after_commit", after_commit)


# what a cache entry was filled at: the database's generation and the app's
# own count of writing commits (which also covers a database the
# watcher cannot see, e.g. SQLite in memory)
Generation = tuple[int, int]


class GenerationWatcher:
    """One app's view of the database's cache generation, read through
    its own one-connection engine (a request never waits behind the app's
    pool for it) at most every ``check_s`` seconds, off the event loop, by
    one request at a time while the others wait for that read."""

    def __init__(self, engine: Engine, *, check_s: float, commits: LocalCommits) -> None:
        self.engine = engine
        self.check_s = check_s
        self.commits = commits
        self.reads = 0
        self._value: Generation | None = None
        self._checked = -math.inf
        # one lock per event loop (a server has one; test clients may start several)
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def _fresh(self) -> bool:
        return (
            self._value is not None
            and self._value[1] == self.commits.value
            and time.monotonic() - self._checked < self.check_s
        )

    def _read(self) -> int:
        with self.engine.connect() as conn:
            return generation.read(conn)

    async def current(self) -> Generation | None:
        """The generation now, or None when the database cannot say (then
        nothing is answered from memory or kept)."""
        if self._fresh():
            return self._value
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        async with self._lock[1]:
            if self._fresh():
                return self._value
            local = self.commits.value  # before the read: a commit during it reads again
            started = time.monotonic()
            try:
                value = await loop.run_in_executor(None, self._read)
            except Exception:
                log.warning("shared cache: cannot read the cache generation", exc_info=True)
                self._value, self._checked = None, -math.inf
                return None
            self.reads += 1
            self._value, self._checked = (value, local), started
            return self._value


@dataclass(frozen=True)
class _Entry:
    headers: list[tuple[bytes, bytes]]
    body: bytes
    etag: bytes | None
    expires: float
    generation: Generation


def _anonymous(scope: Scope) -> bool:
    """No session cookie, no credentials, and a whole-body request (a range
    request goes through: the app answers it 206)."""
    cookie = b""
    for key, value in scope["headers"]:
        if key in (b"authorization", b"range", b"if-range"):
            return False
        if key == b"cookie":
            cookie += value
    # also matches the __Host- prefixed name used over HTTPS
    return SESSION_COOKIE.encode() + b"=" not in cookie


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((v for k, v in scope["headers"] if k == name), None)


class SharedCacheMiddleware:
    def __init__(self, app: ASGIApp, *, seconds: float, watcher: GenerationWatcher) -> None:
        self.app = app
        self.seconds = seconds
        self.watcher = watcher
        self._entries: OrderedDict[tuple[str, bytes], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._bytes = 0
        self.hits = 0
        # the expiry clock; a test replaces it to step time instead of sleeping
        self.clock: Callable[[], float] = time.monotonic
        # keys whose response was kept lately (an ordered set, bounded), and the
        # keys being fetched from the app right now (event loop only: no lock)
        self._kept: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._filling: dict[tuple[str, bytes], asyncio.Event] = {}

    def _lookup(self, key: tuple[str, bytes], current: Generation) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry.generation != current or entry.expires <= self.clock():
                del self._entries[key]
                self._bytes -= len(entry.body)
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry

    def _store(self, key: tuple[str, bytes], entry: _Entry) -> None:
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= len(previous.body)
            self._entries[key] = entry
            self._bytes += len(entry.body)
            self._kept[key] = None
            self._kept.move_to_end(key)
            while len(self._kept) > 4 * MAX_ENTRIES:
                self._kept.popitem(last=False)
            while len(self._entries) > MAX_ENTRIES or self._bytes > MAX_TOTAL_BYTES:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= len(dropped.body)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.seconds <= 0
            or scope["type"] != "http"
            or scope["method"] != "GET"
            or not _anonymous(scope)
        ):
            await self.app(scope, receive, send)
            return
        # as of the request: a write during it wins
        current = await self.watcher.current()
        if current is None:
            await self.app(scope, receive, send)
            return
        key = (scope["path"], scope["query_string"])
        entry = self._lookup(key, current)
        if entry is None and key in self._filling:
            # another request is producing this very response (the entry expired
            # or a write made it old): wait for it instead of rendering the page
            # once per waiting visitor, which made every expiry a burst of 50
            # renders and the p99 of a cached page over a second
            await self._wait_for(key)
            current = await self.watcher.current()
            if current is None:
                await self.app(scope, receive, send)
                return
            entry = self._lookup(key, current)
        if entry is not None:
            await self._answer(scope, send, entry)
            return
        # only a response kept before is worth waiting for: a private or failed
        # one would make its concurrent requests take turns for nothing
        filling = key in self._kept and key not in self._filling
        if filling:
            self._filling[key] = asyncio.Event()
        try:
            await self._fill(scope, receive, send, key, current)
        finally:
            if filling:
                self._filling.pop(key).set()

    async def _wait_for(self, key: tuple[str, bytes]) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._filling[key].wait(), FILL_WAIT_S)

    async def _fill(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        key: tuple[str, bytes],
        current: Generation,
    ) -> None:
        """Pass the request to the app and keep its response if it may be shared."""
        started = self.clock()
        start: Message | None = None
        chunks: list[bytes] = []
        size = 0
        keep = True

        async def capture(message: Message) -> None:
            nonlocal start, size, keep
            if message["type"] == "http.response.start":
                start = message
                keep = _cacheable(message)
                if not keep:
                    self._kept.pop(key, None)
            elif message["type"] == "http.response.body" and keep:
                size += len(message.get("body", b""))
                if size > MAX_BODY_BYTES:
                    keep = False
                    chunks.clear()
                else:
                    chunks.append(message.get("body", b""))
                if not message.get("more_body", False) and keep and start is not None:
                    max_age = _max_age(start)
                    self._store(
                        key,
                        _Entry(
                            headers=list(start["headers"]),
                            body=b"".join(chunks),
                            etag=_etag(start),
                            expires=started + min(self.seconds, max_age),
                            generation=current,
                        ),
                    )
            await send(message)

        await self.app(scope, receive, capture)

    async def _answer(self, scope: Scope, send: Send, entry: _Entry) -> None:
        match = _header(scope, b"if-none-match")
        if entry.etag is not None and match is not None and _matches(match, entry.etag):
            headers = [(k, v) for k, v in entry.headers if k != b"content-length"]
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": 200, "headers": entry.headers})
        await send({"type": "http.response.body", "body": entry.body})


def _cacheable(start: Message) -> bool:
    if start["status"] != 200:
        return False
    names = {k.lower() for k, _ in start["headers"]}
    if b"set-cookie" in names or b"content-length" not in names:
        return False
    control = next((v for k, v in start["headers"] if k.lower() == b"cache-control"), b"")
    # what a response varies on must be what this cache keys on (nobody signed in)
    vary = b",".join(v for k, v in start["headers"] if k.lower() == b"vary")
    if {t.strip().lower() for t in vary.split(b",") if t.strip()} - {b"cookie", b"authorization"}:
        return False
    return b"public" in control and _max_age(start) > 0


def _max_age(start: Message) -> float:
    control = next((v for k, v in start["headers"] if k.lower() == b"cache-control"), b"")
    m = _MAX_AGE.search(control.decode("latin-1"))
    return float(m.group(1)) if m else 0.0


def _etag(start: Message) -> bytes | None:
    return next((v for k, v in start["headers"] if k.lower() == b"etag"), None)


def _matches(header: bytes, etag: bytes) -> bool:
    tags = {t.strip() for t in header.split(b",")}
    return etag in tags or header.strip() == b"*"
