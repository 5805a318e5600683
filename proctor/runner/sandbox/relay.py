"""The host side of a sandbox's wire: a TCP port whose every connection is
piped, bytes both ways, to the sandbox's Unix socket (where the bridge
inside listens). One thread per direction of each connection: the frames
are large binary blobs (camera images) and a thread per direction moves
them at socket speed with the GIL released.

It also watches how the relay is used: ``last_used`` (an open connection
counts as use), ``connections``, and each exchange's latency, the time from
a client's bytes to the first bytes back; an exchange over the budget,
answered late or not at all, calls ``on_latency_exceeded`` once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

CHUNK = 1 << 18
BACKLOG = 64


def connect_unix(path: Path) -> socket.socket:
    """Connect to the socket at ``path`` without following a link: the
    socket folder is the sandbox's to write, and a link there to a host
    socket (a database's, a container runtime's) must not be reached.
    The path is opened O_PATH|O_NOFOLLOW, checked to be a socket, and the
    connection made through that very inode (/proc/self/fd/N)."""
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise ConnectionRefusedError(f"{path} is not a socket")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(f"/proc/self/fd/{fd}")
        except OSError:
            sock.close()
            raise
        return sock
    finally:
        os.close(fd)


class _Exchange:
    """One connection's latency clock: started by the client's bytes when no
    reply is awaited, stopped by the first bytes back."""

    def __init__(self) -> None:
        self.since: float | None = None

    def sent(self, now: float) -> None:
        if self.since is None:
            self.since = now

    def answered(self, now: float) -> float | None:
        since, self.since = self.since, None
        return None if since is None else now - since


class Relay:
    def __init__(
        self,
        host: str,
        port: int,
        socket_path: Path,
        *,
        latency_budget_s: float,
        on_latency_exceeded: Callable[[float], None],
    ) -> None:
        self.socket_path = socket_path
        self.latency_budget_s = latency_budget_s
        self._on_latency = on_latency_exceeded
        self._lock = threading.Lock()
        self._open: dict[socket.socket, _Exchange] = {}
        self._closed = threading.Event()
        self._latency_reported = False
        self._last_used = time.monotonic()
        self.connections = 0
        self.latencies: list[float] = []  # the last exchanges' latencies, seconds
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=BACKLOG)
        self.host, self.port = self._listener.getsockname()[:2]
        self._threads = [
            threading.Thread(target=self._accept, name=f"relay-{self.port}", daemon=True),
            threading.Thread(target=self._watch, name=f"relay-{self.port}-watch", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @property
    def last_used(self) -> float:
        """monotonic time of the last use; now while a connection is open."""
        with self._lock:
            return time.monotonic() if self.connections else self._last_used

    def close(self) -> None:
        """Stop listening and drop every connection (idempotent)."""
        with self._lock:
            self._closed.set()
            sockets = list(self._open)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            # small frames (a handshake, an action) go out at once, not after
            # Nagle's algorithm waits for an acknowledgement
            with contextlib.suppress(OSError):
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _admit(self, sock: socket.socket, exchange: _Exchange) -> bool:
        """Track ``sock`` so that ``close`` drops it; False once closed (the
        check and the tracking under one lock: nothing slips past ``close``)."""
        with self._lock:
            if self._closed.is_set():
                return False
            self._open[sock] = exchange
            return True

    def _serve(self, client: socket.socket) -> None:
        exchange = _Exchange()
        upstream: socket.socket | None = None
        with self._lock:
            self.connections += 1
            self._last_used = time.monotonic()
        try:
            if not self._admit(client, exchange):
                return
            try:
                upstream = connect_unix(self.socket_path)
            except OSError as exc:
                log.info("relay %s: the sandbox's socket refused: %s", self.port, exc)
                return
            if not self._admit(upstream, exchange):
                return
            back = threading.Thread(
                target=self._pump, args=(upstream, client, exchange, False), daemon=True
            )
            back.start()
            self._pump(client, upstream, exchange, True)
            back.join()
        finally:
            with self._lock:
                self._open.pop(client, None)
                if upstream is not None:
                    self._open.pop(upstream, None)
            for sock in (client, upstream):
                if sock is not None:
                    sock.close()
            self._done()

    def _done(self) -> None:
        with self._lock:
            self.connections -= 1
            self._last_used = time.monotonic()

    def _pump(
        self, src: socket.socket, dst: socket.socket, exchange: _Exchange, outbound: bool
    ) -> None:
        try:
            while chunk := src.recv(CHUNK):
                self._seen(exchange, outbound)
                dst.sendall(chunk)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            # one side broke: break the other too, so both pumps end
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _seen(self, exchange: _Exchange, outbound: bool) -> None:
        now = time.monotonic()
        with self._lock:
            self._last_used = now
            if outbound:
                exchange.sent(now)
                return
            latency = exchange.answered(now)
            if latency is not None:
                self.latencies = [*self.latencies[-99:], latency]
        if latency is not None and latency > self.latency_budget_s:
            self._exceeded(latency)

    def _watch(self) -> None:
        """An exchange never answered is over budget too."""
        interval = min(0.5, self.latency_budget_s / 4)
        while not self._closed.wait(interval):
            now = time.monotonic()
            with self._lock:
                waiting = [now - e.since for e in self._open.values() if e.since is not None]
            if waiting and max(waiting) > self.latency_budget_s:
                self._exceeded(max(waiting))

    def _exceeded(self, seconds: float) -> None:
        with self._lock:
            if self._latency_reported:
                return
            self._latency_reported = True
        log.warning(
            "relay %s: an exchange took %.1f s (budget %.1f s)",
            self.port,
            seconds,
            self.latency_budget_s,
        )
        self._on_latency(seconds)
