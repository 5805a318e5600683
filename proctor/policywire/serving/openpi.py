"""Serving a policy over the openpi WebSocket protocol (and its RoboArena dialect).

On connect the server sends its metadata (msgpack); then each binary message
is an observation (with ``endpoint: "reset"`` for a RoboArena reset, answered
with a text acknowledgement) and each reply the packed ``{"actions": (H, D)}``.
A failing request is answered like openpi does: the error text as a text
frame, then close code 1011.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from proctor.policywire.serving.background import BackgroundServer
from proctor.policywire.wire import codec, keys

log = logging.getLogger(__name__)


class PolicySession(Protocol):
    """One connection's policy state (a scripted controller, a model's history…)."""

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]: ...

    def reset(self, message: dict[str, Any]) -> None: ...


class ServedPolicy(Protocol):
    def metadata(self) -> dict[str, Any]: ...

    def new_session(self) -> PolicySession: ...


@dataclass(frozen=True)
class Fault:
    """A deliberate failure, for drilling the station's fault handling.

    ``kind``: ``hang`` (stop answering), ``disconnect`` (drop the connection
    without a close frame), ``bad_shape`` (reply with actions of the wrong
    width) or ``error`` (an openpi-style error text); it strikes on request
    number ``after + 1`` of every connection.
    """

    kind: str
    after: int = 0

    KINDS = ("hang", "disconnect", "bad_shape", "error")

    @classmethod
    def parse(cls, text: str) -> Fault:
        kind, _, after = text.partition(":")
        kind = kind.replace("-", "_")
        if kind not in cls.KINDS:
            raise ValueError(f"fault: '{kind}' is not one of {', '.join(cls.KINDS)}")
        try:
            n = int(after) if after else 0
        except ValueError:
            raise ValueError(f"fault: '{after}' is not a number of requests") from None
        if n < 0:
            raise ValueError("fault: the number of requests must be ≥ 0")
        return cls(kind, n)


class PolicyServer(BackgroundServer):
    def __init__(
        self,
        policy: ServedPolicy,
        host: str = "127.0.0.1",
        port: int = 0,
        fault: Fault | None = None,
    ) -> None:
        self.policy = policy
        self.host = host
        self.port = port
        self.fault = fault
        self._server: Server | None = None
        self.connections = 0
        self._init_serving()

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    async def _handler(self, ws: ServerConnection) -> None:
        self.connections += 1
        self._track_handler()
        session = self.policy.new_session()
        await ws.send(codec.packb(self.policy.metadata()))
        requests = 0
        while True:
            try:
                raw = await ws.recv()
            except ConnectionClosed:
                return
            try:
                if isinstance(raw, str):
                    raise ValueError("expected a binary msgpack message, got text")
                message = codec.unpackb(raw)
                if not isinstance(message, dict):
                    raise ValueError(f"expected a map, got {type(message).__name__}")
                endpoint = message.pop(keys.ROBOARENA_ENDPOINT, "infer")
                if endpoint == "reset":
                    session.reset(message)
                    await ws.send("reset successful")
                    continue
                if endpoint != "infer":
                    raise ValueError(f"unknown endpoint '{endpoint}'")
                requests += 1
                fault = self.fault
                if fault is not None and requests > fault.after:
                    if await self._strike(ws, fault, session, message):
                        return
                    continue
                reply = session.infer(message)
                await ws.send(codec.packb(reply))
            except ConnectionClosed:
                return
            except Exception:
                text = traceback.format_exc()
                log.error("policy request failed:\n%s", text)
                try:
                    await ws.send(text)
                    await ws.close(CloseCode.INTERNAL_ERROR, "internal error; traceback sent")
                except ConnectionClosed:
                    pass
                return

    async def _strike(
        self, ws: ServerConnection, fault: Fault, session: PolicySession, message: dict[str, Any]
    ) -> bool:
        """Apply the fault; True when the connection is finished."""
        if fault.kind == "hang":
            await asyncio.sleep(3600)
            return True
        if fault.kind == "disconnect":
            ws.transport.abort()  # no close frame: like a crashed process
            return True
        if fault.kind == "error":
            await ws.send("Traceback (most recent call last):\nRuntimeError: drill")
            await ws.close(CloseCode.INTERNAL_ERROR, "internal error")
            return True
        reply = session.infer(message)
        actions = reply["actions"]
        reply["actions"] = actions[:, : max(1, actions.shape[1] - 3)]
        await ws.send(codec.packb(reply))
        return False

    async def _serve(self, started: Callable[[], None]) -> None:
        async with serve(
            self._handler, self.host, self.port, compression=None, max_size=None
        ) as server:
            self._server = server
            sock = next(iter(server.sockets))
            self.port = sock.getsockname()[1]
            started()
            await server.serve_forever()
