"""A policy served over the Positronic v1 wire, for the demo and the tests.

A self-contained server written from Positronic's published protocol
(``proctor/policywire/dialects/positronic_frames.py`` sums it up): ``GET /api/v1/models``,
``WS /api/v1/session[/<model_id>]`` with an optional bearer token, loading
status frames then ``ready`` with its ``meta``, and per observation
``{"result": [waypoint, …], "timing": {…}}`` or ``{"error": …}``.

It serves the station's openpi-style policies (the scripted demo policies)
by translating at its edge: Positronic observation keys in, DROID's
``observation/…`` keys to the policy; the policy's ``cartesian_position``
chunk out as ``cartesian_pos`` commands (xyz + row-major rotation matrix)
with ``target_grip`` and a ``timestamp`` per action. ``mistake`` makes it
break one rule of the protocol, for the conformance and fault tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import numpy as np
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from proctor.core import geometry
from proctor.policywire.dialects.positronic_frames import MODELS_PATH, SESSION_PATH
from proctor.policywire.serving.background import BackgroundServer
from proctor.policywire.serving.openpi import ServedPolicy
from proctor.policywire.wire import codec, keys

log = logging.getLogger(__name__)

CMD = b"__cmd__"  # Positronic writes the envelope's key as msgpack bin


def to_openpi_observation(obs: dict[str, Any]) -> dict[str, Any]:
    """Positronic's observation keys → the DROID keys the demo policies read."""
    pose = np.asarray(obs[keys.POSITRONIC_EE_POSE], dtype=np.float64)
    w, x, y, z = pose[3:7]
    euler = geometry.matrix_to_euler(geometry.quat_to_matrix(np.array([x, y, z, w])))
    out = {k: v for k, v in obs.items() if k.startswith(keys.SIM_PREFIX)}
    out[keys.OBS_CARTESIAN_POSITION] = np.concatenate([pose[:3], euler]).astype(np.float32)
    out[keys.OBS_JOINT_POSITION] = np.asarray(obs[keys.POSITRONIC_JOINTS], dtype=np.float32)
    out[keys.OBS_GRIPPER_POSITION] = np.asarray(obs[keys.POSITRONIC_GRIP], dtype=np.float32)
    out[keys.OBS_PROMPT] = obs.get(keys.POSITRONIC_TASK, "")
    if keys.POSITRONIC_EXTERIOR_IMAGE in obs:
        out[keys.OBS_EXTERIOR_IMAGE] = obs[keys.POSITRONIC_EXTERIOR_IMAGE]
    if keys.POSITRONIC_WRIST_IMAGE in obs:
        out[keys.OBS_WRIST_IMAGE] = obs[keys.POSITRONIC_WRIST_IMAGE]
    return out


def cartesian_waypoints(rows: np.ndarray, fps: float) -> list[dict[str, Any]]:
    """A ``cartesian_position`` chunk (xyz, extrinsic xyz Euler, grip) →
    Positronic waypoints, one per ``1 / fps`` s."""
    out = []
    for i, row in enumerate(np.asarray(rows, dtype=np.float64)):
        pose = np.concatenate([row[:3], geometry.euler_to_matrix(row[3:6]).ravel()])
        out.append(
            {
                keys.POSITRONIC_ROBOT_COMMAND: {CMD: {"type": "cartesian_pos", "pose": pose}},
                keys.POSITRONIC_TARGET_GRIP: float(row[6]),
                keys.POSITRONIC_TIMESTAMP: i / fps,
            }
        )
    return out


MISTAKES = (
    "no_ready",  # sends loading frames and never ready
    "refuse",  # answers the session with {"status": "error"} and closes 1008
    "text_ready",  # the ready frame as JSON text
    "joint_delta",  # joint_delta commands
    "bad_rotation",  # a pose whose rotation is not one
    "backwards",  # timestamps that go back in time
    "error_reply",  # {"error": …} instead of a result
    "no_result",  # a map without 'result'
    "hang",  # never answers an observation
    "foreign_layer",  # a local_stack layer the station does not run
    "identity",  # a meta that names the checkpoint's path
)


@dataclass
class PositronicServer(BackgroundServer):
    thread_name = "positronic-server"
    policy: ServedPolicy
    host: str = "127.0.0.1"
    port: int = 0
    models: tuple[str, ...] = ("demo",)
    auth_token: str | None = field(default=None, repr=False)
    loading_frames: int = 1  # "loading" status frames before ready
    image_size_wh: tuple[int, int] | None = (224, 224)
    action_fps: float = 15.0
    mistake: str | None = None
    sessions: int = 0
    last_model: str | None = None

    def __post_init__(self) -> None:
        if self.mistake is not None and self.mistake not in MISTAKES:
            raise ValueError(f"mistake: '{self.mistake}' is not one of {', '.join(MISTAKES)}")
        self._server: Server | None = None
        self._init_serving()

    @property
    def url(self) -> str:
        """The endpoint as a submitter registers it: the host, no path."""
        return f"ws://{self.host}:{self.port}"

    def session_url(self, model: str | None = None) -> str:
        return self.url + SESSION_PATH + (f"/{model}" if model else "")

    # -- HTTP: the model list, and the bearer check before any upgrade ------------
    def _authorized(self, headers: Headers) -> bool:
        return self.auth_token is None or headers.get("Authorization") == (
            f"Bearer {self.auth_token}"
        )

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if not self._authorized(request.headers):
            status = (
                http.HTTPStatus.UNAUTHORIZED if path == MODELS_PATH else http.HTTPStatus.FORBIDDEN
            )
            return connection.respond(status, "Invalid or missing bearer token\n")
        if path == MODELS_PATH:
            response = connection.respond(
                http.HTTPStatus.OK, json.dumps({"models": list(self.models)})
            )
            response.headers["Content-Type"] = "application/json"
            return response
        if path != SESSION_PATH and not path.startswith(SESSION_PATH + "/"):
            return connection.respond(http.HTTPStatus.NOT_FOUND, "Not Found\n")
        return None

    # -- one session -----------------------------------------------------------------
    def _meta(self, model: str) -> dict[str, Any]:
        layers: list[dict[str, Any]] = [{"name": "chunk_player"}]
        if self.mistake == "foreign_layer":
            layers.append({"name": "temporal_stack", "args": {"keys": ["image.wrist"]}})
        meta: dict[str, Any] = {
            "type": "demo",
            "checkpoint_id": model,
            "image_sizes": list(self.image_size_wh) if self.image_size_wh else None,
            "action_fps": self.action_fps,
            "action_horizon_sec": 1.0,
            "local_stack": {"seq": layers},
            "compress_images": False,
        }
        if self.mistake == "identity":
            meta["checkpoint_path"] = f"/home/someone/checkpoints/{model}"
        return meta

    async def _handler(self, ws: ServerConnection) -> None:
        self._track_handler()
        assert ws.request is not None
        parts = urlsplit(ws.request.path)
        requested = unquote(parts.path[len(SESSION_PATH) + 1 :]) or None
        try:
            params = parse_qsl(parts.query, keep_blank_values=True)
            if params:
                # like a Positronic server launched from an instantiated pipeline
                raise ValueError(f"unknown session parameter: {params[0][0]}")
            model = requested or self.models[0]
            if model not in self.models:
                raise ValueError(f"unknown model {model!r}")
            self.sessions += 1
            self.last_model = model
            for i in range(self.loading_frames + (3 if self.mistake == "no_ready" else 0)):
                await ws.send(
                    codec.packb({"status": "loading", "message": f"loading {model} ({i})"})
                )
            if self.mistake == "no_ready":
                await asyncio.sleep(3600)
            if self.mistake == "refuse":
                raise ValueError("this server refuses every session")
            ready = {"status": "ready", "meta": self._meta(model)}
            if self.mistake == "text_ready":
                await ws.send(json.dumps(ready))
            else:
                await ws.send(codec.packb(ready))
        except ConnectionClosed:
            return
        except ValueError as exc:
            with contextlib.suppress(ConnectionClosed):
                await ws.send(codec.packb({"status": "error", "error": str(exc)}))
                await ws.close(1008, str(exc)[:100])
            return
        session = self.policy.new_session()
        while True:
            try:
                raw = await ws.recv()
            except ConnectionClosed:
                return
            started = time.perf_counter()
            try:
                if isinstance(raw, str):
                    raise ValueError("expected a binary msgpack frame")
                obs = codec.unpackb(raw)
                if not isinstance(obs, dict):
                    raise ValueError(f"expected a map, got {type(obs).__name__}")
                reply = self._answer(session, obs)
            except Exception as exc:  # the protocol's error reply; the session stays open
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            if reply is None:  # hang
                await asyncio.sleep(3600)
                return
            reply.setdefault("timing", {"served_ms": (time.perf_counter() - started) * 1000})
            try:
                await ws.send(codec.packb(reply))
            except ConnectionClosed:
                return

    def _answer(self, session: Any, obs: dict[str, Any]) -> dict[str, Any] | None:
        if self.mistake == "hang":
            return None
        if self.mistake == "error_reply":
            return {"error": "model exploded"}
        missing = [
            k
            for k in (keys.POSITRONIC_EE_POSE, keys.POSITRONIC_JOINTS, keys.POSITRONIC_GRIP)
            if k not in obs
        ]
        if missing:
            raise KeyError(f"observation lacks {', '.join(missing)}")
        rows = np.asarray(session.infer(to_openpi_observation(obs))[keys.REPLY_ACTIONS])
        result = cartesian_waypoints(rows, self.action_fps)
        if self.mistake == "no_result":
            return {"actions": rows}
        if self.mistake == "joint_delta":
            for w in result:
                w[keys.POSITRONIC_ROBOT_COMMAND] = {
                    CMD: {"type": "joint_delta", "velocities": np.zeros(7)}
                }
        if self.mistake == "bad_rotation":
            result[0][keys.POSITRONIC_ROBOT_COMMAND][CMD]["pose"] = np.arange(12.0)
        if self.mistake == "backwards" and len(result) > 1:
            result[-1][keys.POSITRONIC_TIMESTAMP] = 0.0
        return {"result": result}

    # -- serving (the lifecycle is serving.BackgroundServer's) ------------------------
    async def _serve(self, started: Callable[[], None]) -> None:
        async with serve(
            self._handler,
            self.host,
            self.port,
            process_request=self._process_request,
            compression=None,
            max_size=None,
        ) as server:
            self._server = server
            self.port = next(iter(server.sockets)).getsockname()[1]
            started()
            await server.serve_forever()
