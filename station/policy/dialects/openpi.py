"""The openpi wire: msgpack metadata on connect, then ``infer(observation) →
{"actions": (H, D)}`` with DROID's observation keys. A server with no
RoboArena keys in its metadata is taken for one (the detection fallback)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from websockets.exceptions import ConnectionClosed

from station import keys
from station.policy import codec
from station.policy.dialects import register
from station.policy.dialects.base import Decoded, Dialect, Session
from station.policy.spec import (
    ErrorReply,
    ProtocolError,
    ServerInfo,
    extract_chunk,
    parse_action_space,
)

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

    from station.drivers.arm.base import ArmState
    from station.drivers.gripper.base import GripperState
    from station.policy.client import PolicyClient


class OpenpiSession(Session):
    def decode(self, raw: Any, observation: dict[str, Any]) -> Decoded:
        if isinstance(raw, str):
            # openpi servers send their traceback as text; it may name the
            # policy, so it is not repeated here
            raise ErrorReply(
                f"policy server sent an error message ({len(raw)} characters) instead of actions"
            )
        space = self.info.action_space
        assert space is not None
        return Decoded(extract_chunk(codec.unpackb(raw), space), space)


@register
class Openpi(Dialect):
    name = "openpi"
    detect_rank = 100  # the fallback: any metadata without RoboArena's keys

    def claims(self, metadata: Mapping[Any, Any]) -> bool:
        return True

    def parse_metadata(
        self,
        metadata: Mapping[Any, Any],
        *,
        default_image_size: tuple[int, int],
        n_cameras_available: int,
    ) -> ServerInfo:
        space = parse_action_space(metadata)
        return ServerInfo(self.ident, space, tuple(default_image_size), 1, True, False)  # type: ignore[arg-type]

    def image_keys(self, info: ServerInfo) -> dict[str, str]:
        return {
            keys.OBS_EXTERIOR_IMAGE: keys.CAMERA_EXTERIOR,
            keys.OBS_WRIST_IMAGE: keys.CAMERA_WRIST,
        }

    def encode(
        self,
        info: ServerInfo,
        *,
        arm: ArmState,
        gripper: GripperState,
        prompt: str,
        images: dict[str, np.ndarray],
    ) -> dict[str, Any]:
        from station.policy.observation import cartesian_position

        obs: dict[str, Any] = {
            keys.OBS_JOINT_POSITION: arm.q.astype(np.float32),
            keys.OBS_CARTESIAN_POSITION: cartesian_position(arm).astype(np.float32),
            keys.OBS_GRIPPER_POSITION: np.array([gripper.position], dtype=np.float32),
            keys.OBS_PROMPT: prompt,
        }
        for key, name in self.image_keys(info).items():
            obs[key] = images[name]
        return obs

    def open(self, client: PolicyClient, ws: ClientConnection) -> Session:
        from station.policy.client import PolicyProtocolError, PolicyUnavailable

        try:
            raw = ws.recv(timeout=client.connect_timeout_s)
        except TimeoutError:
            ws.close()
            raise PolicyUnavailable(
                f"policy server sent no metadata within {client.connect_timeout_s:g} s"
            ) from None
        except ConnectionClosed as exc:
            raise client.closed_early(exc, "its metadata") from None
        try:
            if isinstance(raw, str):
                raise ProtocolError("metadata arrived as text, not msgpack")
            info = client.read_metadata(codec.unpackb(raw))
        except (codec.CodecError, ProtocolError) as exc:
            ws.close()
            raise PolicyProtocolError(f"policy metadata rejected: {exc}") from None
        return info.wire.session(info)

    def served_metadata(self, declared: dict[str, Any], *, action_horizon: int) -> dict[str, Any]:
        # free-form metadata: the action space is the one key the station reads
        return {"action_space": declared["action_space"], "action_horizon": action_horizon}

    def session(self, info: ServerInfo) -> Session:
        """The session state for a server whose metadata ``info`` is."""
        return OpenpiSession(info)
