"""Policy servers written as the field writes them, each from its published
protocol, with openpi's msgpack-numpy written here rather than taken from
the station's codec: an openpi DROID server (``droid_policy.py`` reads
``exterior_image_1_left``), a RoboArena server written to RoboArena's test
script (``exterior_image_0_left``) and vLLM-Omni's openpi-compatible robot
endpoint (``vllm_omni/entrypoints/openpi/connection.py``: a PolicyServerConfig
first, bare arrays back, errors as ``{"type": "error"}`` maps)."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

EXT0 = "observation/exterior_image_0_left"
EXT1 = "observation/exterior_image_1_left"
WRIST = "observation/wrist_image_left"
VLLM_PATH = "/v1/realtime/robot/openpi"
# RoboArena's PolicyServerConfig fields, as vLLM-Omni's robot endpoint sends them
CONFIG = {
    "image_resolution": [180, 320],
    "needs_wrist_camera": True,
    "n_external_cameras": 1,
    "needs_stereo_camera": False,
    "needs_session_id": True,
    "action_space": "joint_velocity",
}
QUICK = dict(observations=2, request_timeout_s=3.0, connect_timeout_s=3.0)


# -- msgpack-numpy as openpi_client.msgpack_numpy writes it ---------------------------------
def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return {
            b"__ndarray__": True,
            b"data": np.ascontiguousarray(obj).tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": list(obj.shape),
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(type(obj).__name__)


def _decode(obj: dict[Any, Any]) -> Any:
    tag = {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}
    if tag.get("__ndarray__"):
        return np.frombuffer(tag["data"], dtype=np.dtype(tag["dtype"])).reshape(tag["shape"])
    if tag.get("__npgeneric__"):
        return np.dtype(tag["dtype"]).type(tag["data"])
    return obj


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_encode, use_bin_type=True)


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, object_hook=_decode, raw=False, strict_map_key=False)


# -- the servers --------------------------------------------------------------------------
def _velocities(image: np.ndarray) -> np.ndarray:
    """A chunk of 8 small joint velocities that follow the image's brightness."""
    rows = np.zeros((8, 8), np.float32)
    rows[:, 0] = 0.05 * (float(np.mean(image)) / 255.0 - 0.5)
    return rows


@dataclass
class FieldServer:
    """What the server saw: the keys and the exterior image's shape of each request."""

    seen: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    def note(self, obs: dict[str, Any], key: str) -> None:
        image = obs.get(key)
        self.seen.append({"keys": sorted(obs), "shape": getattr(image, "shape", None)})


def droid_handler(state: FieldServer) -> Callable[[ServerConnection], None]:
    """openpi's WebsocketPolicyServer serving a DROID policy: free-form metadata,
    ``{"actions": …}`` replies; an exception goes back as its traceback in a
    text frame, then the connection closes 1011."""

    def handle(ws: ServerConnection) -> None:
        ws.send(pack({"policy": "droid"}))
        try:
            for raw in ws:
                obs = unpack(raw)  # type: ignore[arg-type]
                try:
                    state.note(obs, EXT1)
                    image = obs[EXT1]  # DroidInputs reads exterior_image_1_left
                    _ = obs[WRIST]
                    ws.send(pack({"actions": _velocities(image)}))
                except Exception:
                    ws.send(traceback.format_exc())
                    ws.close(1011, "Internal server error")
                    return
        except ConnectionClosed:
            return

    return handle


def roboarena_handler(state: FieldServer) -> Callable[[ServerConnection], None]:
    """A RoboArena server written to RoboArena's test script: it numbers the
    exterior cameras from 0 and reads them with a default (a missing camera
    is a black frame), so the other numbering runs blind rather than failing."""

    def handle(ws: ServerConnection) -> None:
        ws.send(pack(CONFIG))
        try:
            for raw in ws:
                obs = unpack(raw)  # type: ignore[arg-type]
                if obs.pop("endpoint", "infer") == "reset":
                    ws.send(pack({"status": "reset"}))
                    continue
                state.note(obs, EXT0)
                image = obs.get(EXT0, np.zeros((180, 320, 3), np.uint8))
                ws.send(pack(_velocities(image)))  # the bare array
        except ConnectionClosed:
            return

    return handle


def vllm_handler(state: FieldServer) -> Callable[[ServerConnection], None]:
    """vLLM-Omni's ``/v1/realtime/robot/openpi``: a PolicyServerConfig first, bare
    arrays back, ``{"endpoint": "reset"}`` answered with a status, an error as a
    ``{"type": "error"}`` map on a connection kept open; DreamZero reads its
    exterior cameras from ``exterior_image_0_left``."""

    def handle(ws: ServerConnection) -> None:
        ws.send(pack(CONFIG))
        try:
            for raw in ws:
                obs = unpack(raw)  # type: ignore[arg-type]
                if obs.pop("endpoint", "infer") == "reset":
                    ws.send(pack({"status": "reset successful"}))
                    continue
                state.note(obs, EXT0)
                try:
                    image = obs[EXT0]
                except KeyError:
                    ws.send(pack({"type": "error", "message": "Internal inference error"}))
                    continue
                ws.send(pack(_velocities(image)))
        except ConnectionClosed:
            return

    return handle


def _only_the_robot_path(connection: ServerConnection, request: Any) -> Any:
    if request.path != VLLM_PATH:
        return connection.respond(404, "not found\n")
    return None


@pytest.fixture
def field_server() -> Iterator[Callable[..., FieldServer]]:
    servers: list[tuple[Server, threading.Thread]] = []

    def start(
        make: Callable[[FieldServer], Callable[[ServerConnection], None]], path: str = ""
    ) -> FieldServer:
        state = FieldServer()
        server = serve(
            make(state),
            "127.0.0.1",
            0,
            compression=None,
            max_size=None,
            process_request=_only_the_robot_path if path else None,
        )
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        state.url = f"ws://127.0.0.1:{server.socket.getsockname()[1]}{path}"
        return state

    yield start
    for server, thread in servers:
        server.shutdown()
        thread.join(5)
