"""What a policy server declares, and how its actions become arm and gripper commands.

Action spaces (RoboArena's names, DROID's layouts; the last column is always
the gripper target in [0, 1], 0 open, 1 closed):

==================== ===== ==================================================
action_space         width columns
==================== ===== ==================================================
joint_position       8     q1..q7 (rad), gripper
joint_velocity       8     dq1..dq7 (rad/s), gripper
cartesian_position   7     x, y, z (m), roll, pitch, yaw (extrinsic xyz), gripper
cartesian_velocity   7     vx, vy, vz (m/s), wx, wy, wz (rad/s), gripper
==================== ===== ==================================================

A plain openpi server (no RoboArena metadata) gets DROID's defaults: one
exterior and one wrist image at ``policy_image_size``, joint-velocity
actions, unless its metadata names an ``action_space``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from proctor.domain import EndpointDialect
from station import geometry as geo
from station.drivers.arm.base import ArmCommand, ArmCommandKind
from station.drivers.gripper.base import GripperCommand


class ActionSpace(StrEnum):
    joint_position = "joint_position"
    joint_velocity = "joint_velocity"
    cartesian_position = "cartesian_position"
    cartesian_velocity = "cartesian_velocity"

    @property
    def width(self) -> int:
        return 8 if self.value.startswith("joint") else 7

    @property
    def arm_kind(self) -> ArmCommandKind:
        return {
            ActionSpace.joint_position: ArmCommandKind.joint_position,
            ActionSpace.joint_velocity: ArmCommandKind.joint_velocity,
            ActionSpace.cartesian_position: ArmCommandKind.cartesian_pose,
            ActionSpace.cartesian_velocity: ArmCommandKind.cartesian_velocity,
        }[self]


ROBOARENA_KEYS = (
    "image_resolution",
    "needs_wrist_camera",
    "n_external_cameras",
    "needs_stereo_camera",
    "needs_session_id",
    "action_space",
)


class ProtocolError(RuntimeError):
    """The policy server broke the protocol (bad metadata, reply or shape).

    Its message never quotes what the server sent (see ``peer_value``)."""


def peer_value(value: Any) -> str:
    """A value the policy server chose, named by its type and size only.

    Station errors become episode reasons and events that operators and
    reviewers read before a campaign is released. A server picks its keys,
    strings and numbers freely, so quoting any of them would let a submitter
    write their team's name (or a number standing for it) past the blinding;
    the type and a size say what is wrong without carrying the server's text.
    """
    if value is None:
        return "null"
    kind = type(value).__name__
    if isinstance(value, str | bytes | bytearray):
        return f"a {kind} of length {len(value)}"
    if isinstance(value, dict):
        return f"a map of {len(value)} keys"
    if isinstance(value, list | tuple):
        return f"a {kind} of {len(value)} items"
    return f"a value of type {kind}"


@dataclass(frozen=True)
class ServerInfo:
    """The parsed metadata: everything the station needs, nothing that names the policy."""

    dialect: EndpointDialect
    # None: each reply's commands name it (Positronic); fixed for the session once seen
    action_space: ActionSpace | None
    image_size: tuple[int, int] | None  # (H, W) images are fitted to; None: camera size
    n_external_cameras: int
    needs_wrist_camera: bool
    needs_session_id: bool
    action_fps: float | None = None  # the rate a chunk's actions are spaced at, if declared
    # True: fitted inside image_size and padded to it (openpi); False: only fitted
    # inside it, never enlarged (Positronic's client; its codec pads)
    pad_images: bool = True

    @property
    def action_space_text(self) -> str:
        return self.action_space.value if self.action_space else "named by each reply"

    def public(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "dialect": self.dialect.value,
            "action_space": self.action_space.value if self.action_space else None,
            "image_size": list(self.image_size) if self.image_size else None,
            "n_external_cameras": self.n_external_cameras,
            "needs_wrist_camera": self.needs_wrist_camera,
            "needs_session_id": self.needs_session_id,
        }
        if self.dialect == EndpointDialect.positronic_v1:
            out["action_fps"] = self.action_fps
        return out


def parse_metadata(
    metadata: Any,
    *,
    dialect: EndpointDialect | None,
    default_image_size: tuple[int, int],
    n_cameras_available: int = 1,
) -> ServerInfo:
    if not isinstance(metadata, dict):
        raise ProtocolError(f"server metadata must be a map, got {type(metadata).__name__}")
    if dialect is None:
        dialect = (
            EndpointDialect.roboarena
            if any(k in metadata for k in ROBOARENA_KEYS if k != "action_space")
            else EndpointDialect.openpi
        )
    if dialect == EndpointDialect.positronic_v1:
        from station.policy.positronic import parse_meta  # it builds on this module

        return parse_meta(metadata)
    raw_space = metadata.get("action_space")
    if raw_space is None:
        space = ActionSpace.joint_velocity  # DROID's default
    else:
        try:
            space = ActionSpace(str(raw_space))
        except ValueError:
            raise ProtocolError(
                f"metadata.action_space: {peer_value(raw_space)} is not one of "
                f"{', '.join(a.value for a in ActionSpace)}"
            ) from None
    if dialect == EndpointDialect.openpi:
        return ServerInfo(dialect, space, tuple(default_image_size), 1, True, False)  # type: ignore[arg-type]

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
        dialect=dialect,
        action_space=space,
        image_size=image_size,
        n_external_cameras=n_ext,
        needs_wrist_camera=bool(metadata.get("needs_wrist_camera", True)),
        needs_session_id=bool(metadata.get("needs_session_id", False)),
    )


def extract_chunk(reply: Any, space: ActionSpace) -> np.ndarray:
    """The (H, D) float64 action chunk from a reply, or a ProtocolError saying what is wrong."""
    if isinstance(reply, dict):
        if "actions" not in reply:
            raise ProtocolError(f"reply has no 'actions' ({peer_value(reply)})")
        actions = reply["actions"]
    else:
        actions = reply  # RoboArena servers may reply with the bare array
    if not isinstance(actions, np.ndarray):
        raise ProtocolError(f"reply 'actions' must be an array, got {type(actions).__name__}")
    if actions.dtype.kind not in "fiu":
        # the kind letter, not the dtype: a structured dtype carries field names
        raise ProtocolError(
            f"reply 'actions' has dtype kind '{actions.dtype.kind}', expected numbers"
        )
    if actions.ndim == 1:
        actions = actions[None, :]
    if actions.ndim != 2 or actions.shape[0] < 1 or actions.shape[1] != space.width:
        raise ProtocolError(
            f"reply 'actions' has shape {actions.shape}; {space.value} needs (H, {space.width})"
        )
    out = actions.astype(np.float64)
    if not np.all(np.isfinite(out)):
        raise ProtocolError("reply 'actions' contains NaN or infinite values")
    return out


@dataclass(frozen=True)
class StepCommands:
    arm: ArmCommand
    gripper: GripperCommand
    requested: np.ndarray  # the arm part as requested, for telemetry
    gripper_requested: float


_GRIP_SPEED = 1.0
_GRIP_FORCE = 0.5


def to_commands(row: np.ndarray, space: ActionSpace) -> StepCommands:
    """One action row → the arm command and the gripper command it asks for."""
    arm_part = np.asarray(row[:-1], dtype=np.float64)
    grip = float(min(1.0, max(0.0, row[-1])))
    if space == ActionSpace.cartesian_position:
        rot = geo.euler_to_matrix(arm_part[3:6])
        target = np.concatenate([arm_part[:3], geo.matrix_to_quat(rot)])
    else:
        target = arm_part
    return StepCommands(
        arm=ArmCommand(space.arm_kind, target),
        gripper=GripperCommand(position=grip, speed=_GRIP_SPEED, force=_GRIP_FORCE),
        requested=target,
        gripper_requested=grip,
    )


def auth_headers(dialect: EndpointDialect | None, api_key: str | None) -> dict[str, str]:
    """The header carrying a policy server's API key, as its dialect's own client
    sends it: ``Api-Key <key>`` (openpi, RoboArena), ``Bearer <key>`` (Positronic)."""
    if not api_key:
        return {}
    scheme = "Bearer" if dialect == EndpointDialect.positronic_v1 else "Api-Key"
    return {"Authorization": f"{scheme} {api_key}"}
