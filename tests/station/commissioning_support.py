"""A commissioned cell and a real-profile config, for tests of commissioning
and the envelope it feeds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from proctor.station.commissioning.cell_file import (
    CameraReference,
    CommissionedCell,
    Payload,
    TablePlane,
    Tcp,
    Tote,
)
from proctor.station.config import load_station_config
from proctor.station.drivers.arm.base import ArmConfig

LIMITS = ArmConfig()
TABLE_POINTS = [(0.3, -0.4, -0.02), (0.8, -0.4, -0.021), (0.8, 0.4, -0.021), (0.3, 0.4, -0.02)]


def a_cell(**changes: object) -> CommissionedCell:
    cell = CommissionedCell(
        table=TablePlane.fit(TABLE_POINTS),
        totes={
            "left": Tote(0.5, 0.24, 0.15, 0.12, 0.08),
            "right": Tote(0.5, -0.24, 0.15, 0.12, 0.08),
        },
        workspace_min=(0.3, -0.41, 0.0),
        workspace_max=(0.7, 0.41, 0.5),
        home_q=LIMITS.home_q,
        tcp=Tcp((0.0, 0.0, 0.16)),
        payload=Payload(1.1, (0.0, 0.0, 0.06)),
        cameras={"exterior": CameraReference("123456789012", "cell.exterior.png")},
        commissioned_at="2026-11-24T09:00:00+00:00",
    )
    return dataclasses.replace(cell, **changes)  # type: ignore[arg-type]


def real_config(tmp_path: Path, arm: dict[str, object], commissioned: Path | None = None):  # type: ignore[no-untyped-def]
    return load_station_config(
        None,
        commissioned=commissioned,
        real={
            "arm": {"host": "172.16.0.2", **arm},
            "gripper": {"port": "/dev/ttyUSB97"},
            "cameras": {
                "exterior": {"driver": "uvc", "device": "/dev/video98"},
                "wrist": {"driver": "uvc", "device": "/dev/video97"},
            },
        },
    )


# a table 2 cm below the robot base's origin, very slightly tilted
TABLE_POINTS = [(0.3, -0.4, -0.02), (0.8, -0.4, -0.021), (0.8, 0.4, -0.021), (0.3, 0.4, -0.02)]
