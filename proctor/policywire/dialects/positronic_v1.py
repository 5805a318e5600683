"""Positronic's offboard protocol v1 (its frames: ``positronic_frames.py`` beside this).

Status frames then ``ready`` on connect; its own observation keys; replies
are waypoints timed from the call, sampled on the station's control grid.
Its key is a Bearer token; its URL gets the session path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from websockets.exceptions import ConnectionClosed

from proctor.core.recording import keys
from proctor.policywire.dialects import positronic_frames as positronic
from proctor.policywire.dialects import register
from proctor.policywire.dialects.base import (
    Decoded,
    Dialect,
    Handshake,
    Session,
    read_server_timing,
)
from proctor.policywire.wire import codec
from proctor.policywire.wire import keys as wire_keys
from proctor.policywire.wire.spec import ActionSpace, ProtocolError, ServerInfo

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

    from proctor.policywire.wire.proprio import Proprio


class PositronicSession(Session):
    def __init__(self, info: ServerInfo, hello: positronic.Handshake, control_hz: float) -> None:
        super().__init__(info)
        self.hello = hello
        self.control_hz = control_hz
        self.space: ActionSpace | None = None  # named by the replies' commands, once seen

    def request(self, observation: dict[str, Any], session_id: str) -> dict[str, Any]:
        return self.hello.request(observation)

    def decode(self, raw: Any, observation: dict[str, Any]) -> Decoded:
        if isinstance(raw, str):
            raise ProtocolError("a text frame instead of a msgpack reply")
        reply = codec.unpackb(raw)
        if isinstance(reply, dict) and "error" in reply:
            # Positronic's error text may name the model: not repeated
            raise ProtocolError("the policy server reported an error instead of actions")
        pose, q, grip = positronic.hold_state(observation)
        chunk = positronic.decode_result(
            reply,
            control_hz=self.control_hz,
            action_fps=self.info.action_fps,
            hold_pose=pose,
            hold_q=q,
            hold_grip=grip,
            space=self.space,
        )
        self.space = chunk.space
        # waypoints are timed from the call, as Positronic's chunk player plays them
        return Decoded(
            chunk.rows,
            chunk.space,
            timed_from_call=True,
            server_timing=read_server_timing(reply.get(positronic.TIMING), positronic.TIMING_KEYS),
        )

    def end_message(self) -> dict[str, Any] | None:
        # a v3 session is ended in words, so the model frees its state at once
        return self.hello.end()

    def is_end_ack(self, frame: Any) -> bool:
        return isinstance(frame, dict) and frame.get("end_session") is True

    @property
    def action_space(self) -> ActionSpace | None:
        return self.info.action_space or self.space


@register
class PositronicV1(Dialect):
    name = "positronic_v1"
    faces = frozenset({"conformance", "serving"})
    # the client speaks first (its hello); the server answers it
    greets_on_connect = False
    auth_scheme = "Bearer"
    url_path_text = "Positronic's session path"
    chunk_timed_from_call = True  # waypoints, timed from the request

    def dial_url(self, url: str) -> str:
        return positronic.session_url(str(url))

    def parse_metadata(
        self,
        metadata: Mapping[Any, Any],
        *,
        default_image_size: tuple[int, int],
        n_cameras_available: int,
    ) -> ServerInfo:
        return positronic.parse_meta(dict(metadata))

    def public(self, info: ServerInfo) -> dict[str, Any]:
        return {"action_fps": info.action_fps}

    def image_keys(self, info: ServerInfo) -> dict[str, str]:
        return {
            wire_keys.POSITRONIC_EXTERIOR_IMAGE: keys.CAMERA_EXTERIOR,
            wire_keys.POSITRONIC_WRIST_IMAGE: keys.CAMERA_WRIST,
        }

    def encode(
        self,
        info: ServerInfo,
        *,
        proprio: Proprio,
        prompt: str,
        images: dict[str, np.ndarray],
    ) -> dict[str, Any]:
        return positronic.observation(
            q=proprio.q,
            dq=proprio.dq,
            ee_pose=proprio.ee_pose,
            grip=proprio.gripper,
            prompt=prompt,
            images=images,
        )

    def open(self, client: Handshake, ws: ClientConnection) -> Session:
        from proctor.policywire.client import PolicyProtocolError, PolicyUnavailable

        try:
            hello = positronic.read_handshake(
                lambda timeout: ws.recv(timeout=timeout),
                per_message_s=client.status_timeout_s,
                total_s=client.load_timeout_s,
                clock=client.wall.now,
            )
            info = positronic.parse_meta(hello.meta)
        except TimeoutError as exc:
            ws.close()
            raise PolicyUnavailable(f"policy server not ready: {exc}") from None
        except ConnectionClosed as exc:
            raise client.closed_early(exc, "it was ready") from None
        except positronic.SessionRefused as exc:
            ws.close()
            raise PolicyUnavailable(str(exc)) from None
        except ProtocolError as exc:
            ws.close()
            raise PolicyProtocolError(f"policy metadata rejected: {exc}") from None
        return PositronicSession(info, hello, client.control_hz)
