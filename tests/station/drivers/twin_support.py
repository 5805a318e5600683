"""The twin profile's config and a scripted operator, for tests that run the daemon on the twin."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from proctor.station.config import StationConfig, load_station_config
from proctor.station.teleop.source import TeleopCommand

SMALL = {"width": 160, "height": 120, "fps": 15}


def twin_config(workdir: Path, **twin: object) -> StationConfig:
    return load_station_config(
        None,
        name="twin-test",
        cameras={"exterior": SMALL, "wrist": SMALL},
        twin={"workdir": str(workdir), "gripper_activation_s": 0.3, "recording_s": 1.0, **twin},
    )


class ScriptedOperator:
    """A stand-in for the person at the SpaceMouse: drive +x at 3 cm/s with
    the gripper closing."""

    TWIST = np.array([0.03, 0.0, 0.0, 0.0, 0.0, 0.0])

    def command(self) -> TeleopCommand:
        return TeleopCommand(t=0.0, twist=self.TWIST, gripper=1.0)
