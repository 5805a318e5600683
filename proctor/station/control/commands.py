"""An action row → the arm's and the gripper's commands: where the policy
wire's action spaces meet the station's drivers.

The wire (``proctor.policywire``) says what a row means (its action space and
its units, on plain arrays); only the station knows which arm command kind
carries each space, so that mapping lives here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proctor.policywire.wire import units
from proctor.policywire.wire.spec import ActionSpace
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind, ArmState
from proctor.station.drivers.gripper.base import GripperCommand

# the arm command that carries each action space
ARM_KINDS: dict[ActionSpace, ArmCommandKind] = {
    ActionSpace.joint_position: ArmCommandKind.joint_position,
    ActionSpace.joint_velocity: ArmCommandKind.joint_velocity,
    ActionSpace.cartesian_position: ArmCommandKind.cartesian_pose,
    ActionSpace.cartesian_velocity: ArmCommandKind.cartesian_velocity,
}


def arm_kind(space: ActionSpace, action_units: units.ActionUnits | None = None) -> ArmCommandKind:
    """The kind of arm command a row of ``space`` becomes in ``action_units``
    (default SI): DROID's velocity deltas, added to the measured state, are
    position targets."""
    conv = action_units if action_units is not None else units.get("si")
    return ARM_KINDS[ActionSpace(conv.command_space(space.value))]


@dataclass(frozen=True)
class StepCommands:
    arm: ArmCommand
    gripper: GripperCommand
    requested: np.ndarray  # the arm part as requested, for telemetry
    gripper_requested: float


def to_commands(
    row: np.ndarray,
    space: ActionSpace,
    *,
    grip_speed: float = 1.0,
    grip_force: float = 0.5,
    action_units: units.ActionUnits | None = None,
    state: ArmState | None = None,
    control_hz: float = units.DROID_CONTROL_HZ,
) -> StepCommands:
    """One action row → the arm command and the gripper command it asks for
    (policies send a position only; speed and force are the station's).
    ``action_units`` (default SI) may need ``state``, the arm measured for
    this step, and the ``control_hz`` the rows are played at."""
    conv = action_units if action_units is not None else units.get("si")
    arm_part = np.asarray(row[:-1], dtype=np.float64)
    grip = float(min(1.0, max(0.0, row[-1])))
    target = conv.arm_target(arm_part, space.value, state, control_hz)
    return StepCommands(
        arm=ArmCommand(arm_kind(space, conv), target),
        gripper=GripperCommand(position=grip, speed=grip_speed, force=grip_force),
        requested=target,
        gripper_requested=grip,
    )
