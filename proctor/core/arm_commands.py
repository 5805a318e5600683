"""The kinds of command an arm takes: the vocabulary the station's drivers
execute and the recording's action columns carry, which the exporter reads
(so it lives below both)."""

from __future__ import annotations

from enum import StrEnum

N_JOINTS = 7


class ArmCommandKind(StrEnum):
    joint_position = "joint_position"
    joint_velocity = "joint_velocity"
    cartesian_pose = "cartesian_pose"
    cartesian_velocity = "cartesian_velocity"


# the length of a command's target vector, by kind
TARGET_SIZE = {
    ArmCommandKind.joint_position: N_JOINTS,
    ArmCommandKind.joint_velocity: N_JOINTS,
    ArmCommandKind.cartesian_pose: 7,
    ArmCommandKind.cartesian_velocity: 6,
}
