"""Is a sandboxed server ready? Asked through its Unix socket, on its own wire.

A server is ready when it does what its first client would see: the
WebSocket handshake at the URL its dialect dials succeeds and, for dialects
whose server speaks first (openpi's and RoboArena's metadata), that first
message arrives. What each dialect does is its own module's
(``proctor.policywire.dialects``: ``dial_url``, ``greets_on_connect``).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from proctor.policywire import dialects
from proctor.runner.sandbox.relay import connect_unix


def is_ready(dialect: str, socket_path: Path, timeout_s: float = 5.0) -> bool:
    if not socket_path.exists():
        return False
    wire = dialects.get(dialect)
    path = urlsplit(wire.dial_url("ws://localhost/")).path or "/"
    try:
        # the socket folder is the sandbox's to write: a link planted there
        # must not lead the probe to a host socket (connect_unix never follows one)
        sock = connect_unix(socket_path)
        sock.settimeout(timeout_s)
        with connect(
            f"ws://localhost{path}",
            sock=sock,
            open_timeout=timeout_s,
            max_size=None,
            compression=None,
        ) as ws:
            if wire.greets_on_connect:
                ws.recv(timeout=timeout_s)
            return True
    except (OSError, TimeoutError, WebSocketException):
        return False
