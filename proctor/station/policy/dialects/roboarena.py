"""RoboArena's dialect of the openpi wire: the metadata declares the cameras,
image size and action space; requests carry ``endpoint`` (``infer`` or
``reset``) and, when asked for, a session id; a reply may be the bare array."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from proctor.station import keys
from proctor.station.policy.dialects import register
from proctor.station.policy.dialects.base import Session
from proctor.station.policy.dialects.openpi import Openpi, OpenpiSession
from proctor.station.policy.spec import ProtocolError, ServerInfo, parse_action_space, peer_value

if TYPE_CHECKING:
    from proctor.station.policy.conformance_base import CheckState

# metadata keys only a RoboArena server sends (any of them but the action space,
# which plain openpi servers may name too, marks one)
ROBOARENA_KEYS = (
    "image_resolution",
    "needs_wrist_camera",
    "n_external_cameras",
    "needs_stereo_camera",
    "needs_session_id",
    "action_space",
)


class RoboarenaSession(OpenpiSession):
    def _framed(self, message: dict[str, Any], endpoint: str, session_id: str) -> dict[str, Any]:
        message[keys.ROBOARENA_ENDPOINT] = endpoint
        if self.info.needs_session_id:
            message[keys.ROBOARENA_SESSION_ID] = session_id
        return message

    def reset_message(self, session_id: str) -> dict[str, Any] | None:
        return self._framed({}, "reset", session_id)

    def request(self, observation: dict[str, Any], session_id: str) -> dict[str, Any]:
        return self._framed(observation, "infer", session_id)


@register
class Roboarena(Openpi):
    name = "roboarena"
    detect_rank = 10
    reset_name = "RoboArena reset"
    map_replies_only = False  # RoboArena servers may reply with the bare array

    def claims(self, metadata: Mapping[Any, Any]) -> bool:
        return any(k in metadata for k in ROBOARENA_KEYS if k != "action_space")

    def parse_metadata(
        self,
        metadata: Mapping[Any, Any],
        *,
        default_image_size: tuple[int, int],
        n_cameras_available: int,
    ) -> ServerInfo:
        space = parse_action_space(metadata)
        res = metadata.get("image_resolution")
        image_size: tuple[int, int] | None
        if res is None:
            image_size = None
        else:
            try:
                h, w = (int(v) for v in res)
            except (TypeError, ValueError):
                raise ProtocolError(
                    f"metadata.image_resolution: expected (H, W), got {peer_value(res)}"
                ) from None
            if not (8 <= h <= 4096 and 8 <= w <= 4096):
                raise ProtocolError(
                    "metadata.image_resolution: out of range (each side 8 to 4096 pixels)"
                )
            image_size = (h, w)
        n_ext = metadata.get("n_external_cameras", 1)
        if isinstance(n_ext, bool) or not isinstance(n_ext, int) or n_ext < 0:
            raise ProtocolError(
                f"metadata.n_external_cameras: expected 0, 1 or 2, got {peer_value(n_ext)}"
            )
        if n_ext > n_cameras_available:
            raise ProtocolError(
                "metadata.n_external_cameras: the policy needs more exterior cameras than "
                f"this station's {n_cameras_available}"
            )
        if metadata.get("needs_stereo_camera"):
            raise ProtocolError("metadata.needs_stereo_camera: this station has no stereo cameras")
        return ServerInfo(
            dialect=self.ident,
            action_space=space,
            image_size=image_size,
            n_external_cameras=n_ext,
            needs_wrist_camera=bool(metadata.get("needs_wrist_camera", True)),
            needs_session_id=bool(metadata.get("needs_session_id", False)),
        )

    def image_keys(self, info: ServerInfo) -> dict[str, str]:
        wanted = {
            keys.roboarena_exterior_image(i): keys.CAMERA_EXTERIOR
            for i in range(info.n_external_cameras)
        }
        if info.needs_wrist_camera:
            wanted[keys.OBS_WRIST_IMAGE] = keys.CAMERA_WRIST
        return wanted

    def served_metadata(self, declared: dict[str, Any], *, action_horizon: int) -> dict[str, Any]:
        return declared

    def session(self, info: ServerInfo) -> Session:
        return RoboarenaSession(info)

    def check_reset(self, check: CheckState, first: list[np.ndarray]) -> None:
        """A reset in the middle of a session answers as a fresh connection does."""
        check.progress("resetting in the middle of a session")
        warm = max(1, len(first) // 2)
        after = check.episode(" (after a reset)", warmup=warm)
        if after is not None:
            check.judge_repeat(
                first,
                after,
                how=f"after {warm} requests and a reset as after a fresh connection",
                check="reset",
            )
