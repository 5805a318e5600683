"""A DROID-units policy server and its action chunks, for tests of how the
station plays them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve

from proctor.core.domain import Side
from proctor.core.recording import keys
from proctor.core.work import Work


# -- openpi's msgpack-numpy, written from its description ------------------------------------
def _pack_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return {
            b"__ndarray__": True,
            b"data": obj.tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": obj.shape,
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    return obj


def _unpack_hook(obj: dict[Any, Any]) -> Any:
    if b"__ndarray__" in obj:
        return np.ndarray(
            buffer=obj[b"data"], dtype=np.dtype(obj[b"dtype"]), shape=tuple(obj[b"shape"])
        )
    if b"__npgeneric__" in obj:
        return np.dtype(obj[b"dtype"]).type(obj[b"data"])
    return obj


def packb(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_pack_default, use_bin_type=True)


def unpackb(data: bytes) -> Any:
    return msgpack.unpackb(data, object_hook=_unpack_hook, raw=False, strict_map_key=False)


# -- a DROID-style policy server ------------------------------------------------------------------
Actions = Callable[[dict[str, Any], int], np.ndarray]


@dataclass
class Served:
    url: str
    seen: list[dict[str, Any]]  # the observations received, in order


@contextmanager
def droid_server(metadata: dict[str, Any], actions: Actions) -> Iterator[Served]:
    """Serves ``actions(observation, call number)`` as openpi's server does:
    the metadata on connect, then one ``{"actions": chunk}`` per observation."""
    seen: list[dict[str, Any]] = []

    def handler(ws: ServerConnection) -> None:
        ws.send(packb(metadata))
        calls = 0
        try:
            for message in ws:
                obs = unpackb(message)  # type: ignore[arg-type]
                seen.append(obs)
                calls += 1
                ws.send(packb({"actions": actions(obs, calls)}))
        except ConnectionClosed:
            pass

    server = serve(handler, "127.0.0.1", 0, compression=None, max_size=None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Served(f"ws://127.0.0.1:{server.socket.getsockname()[1]}", seen)
    finally:
        server.shutdown()
        thread.join(5)


def joint_chunk(arm: list[float], h: int = 10, grip: float = 0.0) -> np.ndarray:
    """``h`` identical DROID joint-velocity rows (7 joints + the gripper position)."""
    return np.tile(np.array([*arm, grip], dtype=np.float32), (h, 1))


# -- whole simulated episodes ---------------------------------------------------------------
def droid_work(url: str, cap_s: float = 3.0) -> Work:
    return Work(
        run_code="R-DROID1",
        object_name="towels",
        items=1,
        per_item_cap_s=cap_s,
        tote_side=Side.right,
        camera_side=Side.left,
        policy_url=url,
        sim_seed=3,
    )


def recorded_steps(rec: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per action step, its first telemetry row: the measured q, the target
    the station derived (requested) and the target sent (after the envelope)."""
    step = rec.column(keys.ACTION_STEP)
    first = np.flatnonzero(np.diff(step, prepend=-1) > 0)
    first = first[step[first] >= 0]
    q = np.stack([rec.column(c) for c in keys.JOINT_POSITION], axis=1)[first]
    req = np.stack([rec.column(c) for c in keys.ACTION_REQUESTED[:7]], axis=1)[first]
    sent = np.stack([rec.column(c) for c in keys.ACTION_SENT[:7]], axis=1)[first]
    return q, req, sent
