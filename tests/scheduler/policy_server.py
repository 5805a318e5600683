"""A real policy server for the gateway tests: the websockets package's own
server on a loopback port, speaking the openpi convention (a msgpack
metadata message on connect, then one reply per request). It records what
it received so a test can compare bytes on both sides."""

from __future__ import annotations

import hashlib
import socket
import threading
from dataclasses import dataclass, field

import msgpack
from websockets.sync.server import Server, ServerConnection, serve

METADATA = msgpack.packb({"action_space": "joint_velocity", "action_horizon": 10})


@dataclass
class Seen:
    auth: list[str | None] = field(default_factory=list)
    frames: list[bytes | str] = field(default_factory=list)
    close_codes: list[int | None] = field(default_factory=list)


class PolicyServer:
    """Commands arrive as text frames: "close CODE REASON" closes with that
    code and reason; "abort" drops the TCP connection without a close frame.
    A binary frame is answered with msgpack {"actions", "sha256"} of its bytes;
    any other text frame is echoed back as text."""

    def __init__(self, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.seen = Seen()
        self.connected = threading.Event()
        self.closed = threading.Event()
        self._server: Server = serve(self._handle, "127.0.0.1", 0, compression=None, max_size=None)
        self.port = self._server.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def _handle(self, ws: ServerConnection) -> None:
        self.seen.auth.append(ws.request.headers.get("Authorization") if ws.request else None)
        self.connected.set()
        try:
            ws.send(METADATA)
            for frame in ws:
                self.seen.frames.append(frame)
                if isinstance(frame, bytes):
                    digest = hashlib.sha256(frame).hexdigest()
                    ws.send(msgpack.packb({"actions": [[0.0] * 8] * 10, "sha256": digest}))
                elif frame.startswith("close "):
                    _, code, reason = frame.split(" ", 2)
                    ws.close(int(code), reason)
                elif frame == "abort":
                    ws.socket.shutdown(socket.SHUT_RDWR)
                    ws.socket.close()
                    return
                else:
                    ws.send(frame)
        finally:
            self.seen.close_codes.append(ws.close_code)
            self.closed.set()

    def __enter__(self) -> PolicyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._thread.join(timeout=10)
