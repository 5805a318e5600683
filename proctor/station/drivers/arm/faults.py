"""The words an arm driver uses to say whose doing its faults are.

The control loop attributes an arm fault to its cause
(``proctor.station.control.attribution``) from the fault's kind and from the
controller's own flags. Only the driver knows what its controller's flags
mean, so each arm hands the loop its table (``Arm.fault_flag_causes``): a flag
name → its ``FlagCause``. An arm whose controller names no flags returns an
empty table, and its faults go by their kind alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import NamedTuple


class Cause(StrEnum):
    policy = "policy"  # the policy's motion met the world, or the arm itself
    station = "station"  # the station's command, limits, realtime link or set-up
    operator = "operator"  # the hardware user stop was pressed
    unknown = "unknown"  # nothing says: counted as a safety stop, as before attribution


class FlagCause(NamedTuple):
    """What one controller flag says."""

    cause: Cause
    # when several flags are set, the highest precedence decides
    precedence: int
    # the flag says the link to the controller failed (its realtime deadlines
    # missed): no motion causes that, so it is never charged to a policy's motion
    link: bool = False


# a controller's flag names → what each says
FlagCauses = Mapping[str, FlagCause]

NO_FLAG_CAUSES: FlagCauses = {}

__all__ = ["NO_FLAG_CAUSES", "Cause", "FlagCause", "FlagCauses"]
