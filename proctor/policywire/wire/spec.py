"""What a policy server declares, and the action spaces its rows are in (the
station turns them into arm and gripper commands: ``proctor.station.control.commands``).

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

The velocity rows' units are the server's ``action_units``
(``proctor/policywire/wire/units.py``): ``si`` as in the table, or ``droid``,
DROID's normalised per-step deltas, which the station turns into position
targets each step as DROID's runtime does.

A plain openpi server (no RoboArena metadata) gets DROID's defaults: one
exterior and one wrist image at ``policy_image_size``, joint-velocity
actions in DROID's units, unless its metadata names an ``action_space``
(then SI units) or ``action_units``, or the endpoint selects the units
(``select_action_units``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from proctor.core.domain import EndpointDialect
from proctor.policywire.wire import keys, units


class ActionSpace(StrEnum):
    joint_position = "joint_position"
    joint_velocity = "joint_velocity"
    cartesian_position = "cartesian_position"
    cartesian_velocity = "cartesian_velocity"

    @property
    def width(self) -> int:
        return 8 if self.value.startswith("joint") else 7


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
    # the number of the first exterior camera in the observation's keys
    # (``observation/exterior_image_{i}_left``): 1 as DROID policies read them, or
    # 0 where the endpoint chose it (dialects whose keys number no camera ignore it)
    exterior_first_index: int = keys.EXTERIOR_FIRST_INDEX
    # what a velocity row's numbers mean (``units.get``): "si" or "droid"
    action_units: str = "si"

    @property
    def action_space_text(self) -> str:
        if self.action_space is None:
            return "named by each reply"
        # the units matter only where they change what is sent: velocities in DROID's
        space = self.action_space.value
        if units.get(self.action_units).command_space(space) != space:
            return f"{self.action_space.value} in {self.action_units} units"
        return self.action_space.value

    def public(self) -> dict[str, Any]:
        """The declared settings every dialect has (``handshake.public_info``
        adds the dialect's own)."""
        out: dict[str, Any] = {
            "dialect": str(self.dialect),
            "action_space": self.action_space.value if self.action_space else None,
            "image_size": list(self.image_size) if self.image_size else None,
            "n_external_cameras": self.n_external_cameras,
            "needs_wrist_camera": self.needs_wrist_camera,
            "needs_session_id": self.needs_session_id,
            "action_units": self.action_units,
        }
        return out


class UnitsConflict(ProtocolError):
    """The endpoint selects other action units than the server's metadata
    declares. Neither is chosen over the other: one of them is wrong, and
    reading a policy's velocities in the wrong units scores the adapter."""

    def __init__(self, selected: str, declared: str) -> None:
        super().__init__(
            f"{units.METADATA_KEY}: the endpoint selects '{selected}' but the server's "
            f"metadata declares '{declared}'"
        )
        self.selected = selected
        self.declared = declared


# where a submission's manifest keeps the wire settings of its endpoint (settings of
# the protocol, like the dialect: they reach the station with the claim, never a name)
MANIFEST_WIRE = "wire"
MANIFEST_EXTERIOR_NUMBERING = "exterior_numbering"
MANIFEST_ACTION_UNITS = units.METADATA_KEY
# a checkpoint's policy.toml section, where its action units are selected
MANIFEST_POLICY = "policy"


def manifest_exterior_numbering(manifest: Any) -> int | None:
    """The exterior numbering a submission's manifest chose (None: the default)."""
    wire = manifest.get(MANIFEST_WIRE) if isinstance(manifest, dict) else None
    value = wire.get(MANIFEST_EXTERIOR_NUMBERING) if isinstance(wire, dict) else None
    if value is None:
        return None
    return check_exterior_numbering(value)


def manifest_action_units(manifest: Any) -> str | None:
    """The action units a submission selects (None: the server's metadata
    decides): an endpoint's among its manifest's wire settings, a checkpoint's
    in its policy.toml's ``[policy]``, as the manifest keeps it."""
    if not isinstance(manifest, dict):
        return None
    for section in (MANIFEST_WIRE, MANIFEST_POLICY):
        part = manifest.get(section)
        value = part.get(MANIFEST_ACTION_UNITS) if isinstance(part, dict) else None
        if value is not None:
            return units.check(value)
    return None


def check_exterior_numbering(value: Any) -> int:
    """An endpoint's exterior camera numbering: 0 or 1 (``ValueError`` naming the field)."""
    if isinstance(value, bool) or value not in keys.EXTERIOR_NUMBERINGS:
        raise ValueError(
            "exterior_numbering: must be "
            + " or ".join(str(n) for n in keys.EXTERIOR_NUMBERINGS)
            + " (the number of the first exterior camera's key)"
        )
    return int(value)


def parse_action_space(metadata: Any) -> ActionSpace:
    """``metadata.action_space`` (absent: DROID's joint velocities)."""
    raw_space = metadata.get("action_space")
    if raw_space is None:
        return ActionSpace.joint_velocity  # DROID's default
    try:
        return ActionSpace(str(raw_space))
    except ValueError:
        raise ProtocolError(
            f"metadata.action_space: {peer_value(raw_space)} is not one of "
            f"{', '.join(a.value for a in ActionSpace)}"
        ) from None


def parse_action_units(metadata: Any, *, default: str) -> str:
    """``metadata.action_units`` (absent: ``default``, the dialect's convention)."""
    raw = metadata.get(units.METADATA_KEY)
    if raw is None:
        return default
    if not isinstance(raw, str) or raw not in units.names():
        raise ProtocolError(
            f"metadata.{units.METADATA_KEY}: {peer_value(raw)} is not one of "
            f"{', '.join(units.names())}"
        )
    return raw


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


def first_due_row(elapsed_s: float, control_hz: float, rows: int) -> int:
    """The row of a chunk timed from its call that is due ``elapsed_s`` after
    the call: rows already past when the reply arrives are skipped (the last
    one is kept: it is what is in force)."""
    due = math.floor(max(0.0, elapsed_s) * control_hz + 1e-9)
    return min(due, max(0, rows - 1))


class ErrorReply(ProtocolError):
    """The server answered a request with an error text instead of actions.
    The message is the station's own words; the connection is closed."""
