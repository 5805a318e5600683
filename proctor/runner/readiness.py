"""Is a sandboxed server ready? Asked through its Unix socket, per wire dialect.

A server is ready when it does what its first client would see: for openpi
and RoboArena, the WebSocket handshake succeeds and the metadata frame the
server sends on connect arrives; for Positronic v1, the handshake at its
session path succeeds. Probes are found by dialect name in ``PROBES``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from websockets.exceptions import WebSocketException
from websockets.sync.client import unix_connect

Probe = Callable[[Path, float], bool]


def _first_frame(path: Path, timeout_s: float) -> bool:
    try:
        with unix_connect(
            str(path),
            uri="ws://localhost/",
            open_timeout=timeout_s,
            max_size=None,
            compression=None,
        ) as ws:
            ws.recv(timeout=timeout_s)
            return True
    except (OSError, TimeoutError, WebSocketException):
        return False


def _handshake_at(session_path: str) -> Probe:
    def probe(path: Path, timeout_s: float) -> bool:
        try:
            with unix_connect(
                str(path),
                uri=f"ws://localhost{session_path}",
                open_timeout=timeout_s,
                compression=None,
            ):
                return True
        except (OSError, TimeoutError, WebSocketException):
            return False

    return probe


PROBES: dict[str, Probe] = {
    "openpi": _first_frame,
    "roboarena": _first_frame,
    # Positronic's protocol 1 opens a session at /api/v1/session (its dialect's dial_url)
    "positronic_v1": _handshake_at("/api/v1/session"),
}


def is_ready(dialect: str, socket_path: Path, timeout_s: float = 5.0) -> bool:
    return socket_path.exists() and PROBES[dialect](socket_path, timeout_s)
