from proctor.station.drivers.arm.base import (
    ARMS,
    Arm,
    ArmCommand,
    ArmCommandKind,
    ArmConfig,
    ArmErrorKind,
    ArmFault,
    ArmState,
)

__all__ = [
    "ARMS",
    "Arm",
    "ArmCommand",
    "ArmCommandKind",
    "ArmConfig",
    "ArmErrorKind",
    "ArmFault",
    "ArmState",
]
