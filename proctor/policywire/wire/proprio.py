"""The robot's part of an observation, as plain data.

What a dialect encodes of the robot is these few arrays, whichever arm and
gripper measured them: the station fills one from its drivers' states
(``proctor.station.control.observe``), the conformance check from its recorded
observations, so the protocol layer never reads a driver's type.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Proprio:
    q: np.ndarray  # (7,) measured joint positions, rad
    dq: np.ndarray  # (7,) measured joint velocities, rad/s
    ee_pose: np.ndarray  # (7,) [x, y, z, qx, qy, qz, qw]: m, robot base frame
    gripper: float  # measured finger position, 0 = open … 1 = closed
