"""What every teleop input produces: a twist and a gripper target, stamped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class TeleopLimits:
    # full deflection commands this tool speed: a careful human demonstration
    # near bins, about a third of what the station lets policies do
    max_linear_m_s: float = 0.15
    max_angular_rad_s: float = 0.6


@dataclass(frozen=True)
class TeleopCommand:
    t: float  # station-clock time the input was read
    twist: np.ndarray  # (6,) [vx, vy, vz, wx, wy, wz], robot base frame, m/s and rad/s
    gripper: float  # target, 0 open … 1 closed

    @classmethod
    def still(cls, t: float, gripper: float) -> TeleopCommand:
        return cls(t=t, twist=np.zeros(6), gripper=gripper)

    def action_row(self) -> np.ndarray:
        """The ``cartesian_velocity`` action row a policy would send."""
        return np.concatenate([self.twist, [self.gripper]]).astype(np.float64)


class TeleopSource(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def command(self) -> TeleopCommand:
        """The operator's command now (zero twist when the input went quiet)."""
        ...
