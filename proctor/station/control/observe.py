"""The station's measured state → the plain data the policy wire encodes."""

from __future__ import annotations

from proctor.policywire.wire.proprio import Proprio
from proctor.station.drivers.arm.base import ArmState
from proctor.station.drivers.gripper.base import GripperState


def proprio(arm: ArmState, gripper: GripperState) -> Proprio:
    """The robot's part of an observation, from the arm's and the gripper's states."""
    return Proprio(q=arm.q, dq=arm.dq, ee_pose=arm.ee_pose, gripper=gripper.position)
