"""RoboArena's dialect of the openpi wire: the metadata declares the cameras,
image size and action space; requests carry ``endpoint`` (``infer`` or
``reset``) and, when asked for, a session id; a reply may be the bare array."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from proctor.policywire.dialects import register
from proctor.policywire.dialects.base import Session
from proctor.policywire.dialects.openpi import Openpi, OpenpiSession
from proctor.policywire.dialects.server_config import declares_config, read_config
from proctor.policywire.wire import keys
from proctor.policywire.wire.spec import ServerInfo, parse_action_space, parse_action_units

if TYPE_CHECKING:
    pass


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

    def claims(self, metadata: Mapping[Any, Any]) -> bool:
        return declares_config(metadata)

    def parse_metadata(
        self,
        metadata: Mapping[Any, Any],
        *,
        default_image_size: tuple[int, int],
        n_cameras_available: int,
    ) -> ServerInfo:
        space = parse_action_space(metadata)
        config = read_config(metadata, n_cameras_available=n_cameras_available)
        return ServerInfo(
            dialect=self.ident,
            action_space=space,
            image_size=config.image_size,
            n_external_cameras=config.n_external_cameras,
            needs_wrist_camera=config.needs_wrist_camera,
            needs_session_id=config.needs_session_id,
            # RoboArena's servers are DROID policies: its velocities are DROID's
            action_units=parse_action_units(metadata, default="droid"),
        )

    def session(self, info: ServerInfo) -> Session:
        return RoboarenaSession(info)
