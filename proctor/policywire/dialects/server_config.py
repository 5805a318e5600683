"""The ``PolicyServerConfig`` handshake: the metadata a RoboArena server sends
first, and that openpi-compatible servers written for RoboArena's clients send
on the plain openpi wire too.

RoboArena's policy server (and DreamZero's copy of it) declares a dataclass
``PolicyServerConfig`` with the fields ``image_resolution`` (H, W),
``needs_wrist_camera``, ``n_external_cameras``, ``needs_stereo_camera``,
``needs_session_id`` and ``action_space``, and sends them as a msgpack map
when a client connects. vLLM-Omni's openpi-compatible robot endpoint
(``/v1/realtime/robot/openpi``, ``vllm_omni/entrypoints/openpi/connection.py``)
does the same: "Connect -> server sends msgpack(PolicyServerConfig fields)",
then replies to each observation with the bare action array, answers
``{"endpoint": "reset"}`` with a status map, and reports an error as a binary
``{"type": "error", "message": …}`` map on a connection it keeps open. Read
from their public sources; not run against a live vLLM-Omni here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proctor.policywire.wire.spec import ProtocolError, peer_value

# the fields of ``PolicyServerConfig`` (any of them but the action space, which
# plain openpi servers may name too, marks a server that sends one)
CONFIG_KEYS = (
    "image_resolution",
    "needs_wrist_camera",
    "n_external_cameras",
    "needs_stereo_camera",
    "needs_session_id",
    "action_space",
)


@dataclass(frozen=True)
class ServerConfig:
    """What a ``PolicyServerConfig`` asks the station for."""

    image_size: tuple[int, int] | None  # None: not declared
    n_external_cameras: int
    needs_wrist_camera: bool
    needs_session_id: bool


def declares_config(metadata: Mapping[Any, Any]) -> bool:
    """Whether the metadata is a ``PolicyServerConfig`` (RoboArena's keys)."""
    return any(k in metadata for k in CONFIG_KEYS if k != "action_space")


def read_config(metadata: Mapping[Any, Any], *, n_cameras_available: int) -> ServerConfig:
    """The config's fields, checked against what the station has."""
    if metadata.get("needs_stereo_camera"):
        raise ProtocolError("metadata.needs_stereo_camera: this station has no stereo cameras")
    return ServerConfig(
        image_size=_image_size(metadata.get("image_resolution")),
        n_external_cameras=_n_external(metadata.get("n_external_cameras", 1), n_cameras_available),
        needs_wrist_camera=bool(metadata.get("needs_wrist_camera", True)),
        needs_session_id=bool(metadata.get("needs_session_id", False)),
    )


def _image_size(res: Any) -> tuple[int, int] | None:
    if res is None:
        return None
    try:
        h, w = (int(v) for v in res)
    except (TypeError, ValueError):
        raise ProtocolError(
            f"metadata.image_resolution: expected (H, W), got {peer_value(res)}"
        ) from None
    if not (8 <= h <= 4096 and 8 <= w <= 4096):
        raise ProtocolError("metadata.image_resolution: out of range (each side 8 to 4096 pixels)")
    return (h, w)


def _n_external(n_ext: Any, available: int) -> int:
    if isinstance(n_ext, bool) or not isinstance(n_ext, int) or n_ext < 0:
        raise ProtocolError(
            f"metadata.n_external_cameras: expected 0, 1 or 2, got {peer_value(n_ext)}"
        )
    if n_ext > available:
        raise ProtocolError(
            "metadata.n_external_cameras: the policy needs more exterior cameras than "
            f"this station's {available}"
        )
    return n_ext
