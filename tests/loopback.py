"""Loopback stand-ins for the network tests of ``proctor.core.netguard``: a TCP
port that counts who connects, a WebSocket server that answers the
handshake with a redirect, and a resolver whose answers a test scripts.
Everything listens on 127.0.0.1 only."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from websockets.sync.server import Server, ServerConnection, serve


class TcpWitness:
    """A loopback port that accepts connections and counts them (and says
    nothing): the place a redirect or a rebound name would lead to."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port: int = self._sock.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def __enter__(self) -> TcpWitness:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._sock.close()
        self._thread.join(5)


@contextlib.contextmanager
def redirecting_server(location: str, status: int = 302) -> Iterator[str]:
    """A WebSocket server on loopback answering every handshake with
    ``status`` and ``Location: location``; yields its ws:// URL."""

    def redirect(connection: ServerConnection, request: Any) -> Any:
        response = connection.respond(status, "moved\n")
        response.headers["Location"] = location
        return response

    server: Server = serve(lambda ws: None, "127.0.0.1", 0, process_request=redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}"
    finally:
        server.shutdown()
        thread.join(5)


class ScriptedResolver:
    """``socket.getaddrinfo`` for one made-up name answers the scripted
    addresses in turn (the last one from then on; "" for "no such host");
    every other name is resolved as usual. ``calls`` counts the lookups of
    the name."""

    def __init__(self, name: str, answers: Sequence[str]) -> None:
        self.name = name
        self.answers = list(answers)
        self.calls = 0
        self._real = socket.getaddrinfo

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != self.name:
            return self._real(host, port, *args, **kwargs)
        address = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if not address:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sockaddr = (address, int(port), 0, 0) if family == socket.AF_INET6 else (address, int(port))
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr)]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> ScriptedResolver:
        monkeypatch.setattr(socket, "getaddrinfo", self)
        return self
