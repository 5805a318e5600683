"""A shared cache in front of the app, for what the app itself calls public.

The result pages of a released campaign, seen by nobody in particular, are
answered ``cache-control: public, max-age=30`` with ``vary: cookie,
authorization`` (``web.leaderboard.caching``): any proxy may keep them. This
is that proxy, in the process: a request with no session cookie and no
``authorization`` header gets the stored bytes of the last such response for
the same path and query, without routing, middleware or a database query.

It keeps a response for ``min(max-age, web.shared_cache_s)`` seconds, and
forgets everything whenever this process commits a database write (a new
snapshot, a release, a policy's opt-in): what this process changed shows at
once, and a change made by another process (the CLI, a second server) within
``shared_cache_s`` — well inside the ``max-age`` every browser was already
allowed. Only 200 responses with a length and no ``set-cookie`` are kept.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proctor.db.engine import ProctorSession
from web.auth.sessions import SESSION_COOKIE

MAX_ENTRIES = 512
MAX_BODY_BYTES = 2 * 1024 * 1024  # one response
MAX_TOTAL_BYTES = 64 * 1024 * 1024  # all of them: the least recently used go first
_MAX_AGE = re.compile(r"max-age=(\d+)")


class _Generation:
    """Bumped after every commit in this process that wrote something."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def bump(self) -> None:
        with self._lock:
            self.value += 1


GENERATION = _Generation()


def _mark_write(session: Session, *_: object) -> None:
    session.info["proctor.wrote"] = True


def _mark_statement(state: ORMExecuteState) -> None:
    # an UPDATE, DELETE, INSERT or textual statement through the session: a write,
    # unless it is plainly a SELECT (erring towards clearing the cache)
    if not state.is_select:
        _mark_write(state.session)


def _after_commit(session: Session) -> None:
    if session.info.pop("proctor.wrote", False):
        GENERATION.bump()


def _after_rollback(session: Session) -> None:
    session.info.pop("proctor.wrote", None)


event.listen(ProctorSession, "after_flush", _mark_write)
event.listen(ProctorSession, "do_orm_execute", _mark_statement)
event.listen(ProctorSession, "after_commit", _after_commit)
event.listen(ProctorSession, "after_rollback", _after_rollback)


@dataclass(frozen=True)
class _Entry:
    headers: list[tuple[bytes, bytes]]
    body: bytes
    etag: bytes | None
    expires: float
    generation: int


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
    def __init__(self, app: ASGIApp, *, seconds: float) -> None:
        self.app = app
        self.seconds = seconds
        self._entries: OrderedDict[tuple[str, bytes], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._bytes = 0
        self.hits = 0

    def _lookup(self, key: tuple[str, bytes]) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry.generation != GENERATION.value or entry.expires <= time.monotonic():
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
        key = (scope["path"], scope["query_string"])
        entry = self._lookup(key)
        if entry is not None:
            await self._answer(scope, send, entry)
            return
        generation = GENERATION.value  # as of the request: a write during it wins
        started = time.monotonic()
        start: Message | None = None
        chunks: list[bytes] = []
        size = 0
        keep = True

        async def capture(message: Message) -> None:
            nonlocal start, size, keep
            if message["type"] == "http.response.start":
                start = message
                keep = _cacheable(message)
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
                            generation=generation,
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
