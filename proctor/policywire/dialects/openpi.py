"""The openpi wire: msgpack metadata on connect, then ``infer(observation) →
{"actions": (H, D)}`` with DROID's observation keys. A server with no
RoboArena keys in its metadata is taken for one (the detection fallback)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from websockets.exceptions import ConnectionClosed

from proctor.core.recording import keys
from proctor.policywire.dialects import register
from proctor.policywire.dialects.base import (
    Decoded,
    Dialect,
    Handshake,
    Session,
    read_server_timing,
)
from proctor.policywire.dialects.server_config import declares_config, read_config
from proctor.policywire.handshake import dialect_of
from proctor.policywire.wire import codec
from proctor.policywire.wire import keys as wire_keys
from proctor.policywire.wire.spec import (
    ErrorReply,
    ProtocolError,
    ServerInfo,
    extract_chunk,
    parse_action_space,
    parse_action_units,
)

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

    from proctor.policywire.wire.proprio import Proprio


# what openpi's WebsocketPolicyServer adds to every reply map: the time its
# policy.infer took, and from the second reply on the previous cycle's
# receive-to-sent total (src/openpi/serving/websocket_policy_server.py)
SERVER_TIMING = "server_timing"
SERVER_TIMING_KEYS = frozenset({"infer_ms", "prev_total_ms"})


def is_error_map(reply: Any) -> bool:
    """A ``{"type": "error", "message": …}`` reply (vLLM-Omni's error convention)."""
    return isinstance(reply, dict) and reply.get("type") == "error" and "actions" not in reply


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
        reply = codec.unpackb(raw)
        if is_error_map(reply):
            # vLLM-Omni's robot endpoint reports a failed request so, keeping the
            # connection open; its message may name the policy and is not repeated
            raise ErrorReply("policy server sent an error map instead of actions")
        timing = reply.get(SERVER_TIMING) if isinstance(reply, dict) else None
        return Decoded(
            extract_chunk(reply, space),
            space,
            server_timing=read_server_timing(timing, SERVER_TIMING_KEYS),
        )

    def request(self, observation: dict[str, Any], session_id: str) -> dict[str, Any]:
        if self.info.needs_session_id:  # a ``PolicyServerConfig`` that asked for it
            observation[wire_keys.ROBOARENA_SESSION_ID] = session_id
        return observation


@register
class Openpi(Dialect):
    name = "openpi"
    faces = frozenset({"conformance", "serving"})
    detect_rank = 100  # the fallback: any metadata without RoboArena's keys
    numbers_exterior_cameras = True
    velocity_actions = True

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
        size = (int(default_image_size[0]), int(default_image_size[1]))
        # metadata naming no action space gets DROID's defaults, its units
        # included (openpi's DROID policies send none); a named space is SI
        # unless the metadata says otherwise
        units = parse_action_units(
            metadata, default="si" if "action_space" in metadata else "droid"
        )
        if not declares_config(metadata):
            return ServerInfo(self.ident, space, size, 1, True, False, action_units=units)
        # a ``PolicyServerConfig`` first frame (vLLM-Omni's robot endpoint, servers
        # written for RoboArena's clients) on the openpi wire: what it asks for is honoured
        config = read_config(metadata, n_cameras_available=n_cameras_available)
        return ServerInfo(
            dialect=self.ident,
            action_space=space,
            image_size=config.image_size or size,
            n_external_cameras=config.n_external_cameras,
            needs_wrist_camera=config.needs_wrist_camera,
            needs_session_id=config.needs_session_id,
            action_units=units,
        )

    def image_keys(self, info: ServerInfo) -> dict[str, str]:
        first = info.exterior_first_index
        wanted = {
            wire_keys.exterior_image(first + i): keys.CAMERA_EXTERIOR
            for i in range(info.n_external_cameras)
        }
        if info.needs_wrist_camera:
            wanted[wire_keys.OBS_WRIST_IMAGE] = keys.CAMERA_WRIST
        return wanted

    def public(self, info: ServerInfo) -> dict[str, Any]:
        return {"exterior_first_index": info.exterior_first_index}

    def encode(
        self,
        info: ServerInfo,
        *,
        proprio: Proprio,
        prompt: str,
        images: dict[str, np.ndarray],
    ) -> dict[str, Any]:
        from proctor.policywire.observation import cartesian_position

        obs: dict[str, Any] = {
            wire_keys.OBS_JOINT_POSITION: proprio.q.astype(np.float32),
            wire_keys.OBS_CARTESIAN_POSITION: cartesian_position(proprio.ee_pose).astype(
                np.float32
            ),
            wire_keys.OBS_GRIPPER_POSITION: np.array([proprio.gripper], dtype=np.float32),
            wire_keys.OBS_PROMPT: prompt,
        }
        for key, name in self.image_keys(info).items():
            obs[key] = images[name]
        return obs

    def open(self, client: Handshake, ws: ClientConnection) -> Session:
        from proctor.policywire.client import PolicyProtocolError, PolicyUnavailable

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
        return dialect_of(info).session(info)

    def session(self, info: ServerInfo) -> Session:
        """The session state for a server whose metadata ``info`` is."""
        return OpenpiSession(info)
