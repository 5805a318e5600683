from proctor.station.drivers.gripper.base import (
    GRIPPERS,
    Gripper,
    GripperCommand,
    GripperConfig,
    GripperFault,
    GripperState,
)

__all__ = ["GRIPPERS", "Gripper", "GripperCommand", "GripperConfig", "GripperFault", "GripperState"]
