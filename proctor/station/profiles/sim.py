"""Profile ``sim``: the kinematic simulated cell (``proctor/station/sim/``).

Its ``[sim]`` section::

    clock = "virtual"      # "virtual": faster than real time, deterministic by seed;
                           # "monotonic": real time, for a person at the console
    physics_hz = 100
    v_max = 1.0            # m/s, Cartesian speed limit
    reflex_speed = 0.35    # m/s: touching a wall or the floor faster is a safety stop

Cameras default to 320×240 at 15 fps (cheap enough for a whole demo campaign
on two cores); ``[cameras.exterior]`` / ``[cameras.wrist]`` override them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from proctor.core.clock import Clock, MonotonicClock, VirtualClock
from proctor.core.errors import ConfigError
from proctor.core.recording import keys
from proctor.station.cell import Cell
from proctor.station.config import CameraSettings, StationConfig
from proctor.station.drivers.camera.base import Camera
from proctor.station.profiles import PROFILES, camera_settings
from proctor.station.sim.arm import SimArm
from proctor.station.sim.camera import SimCamera, SimCameraConfig
from proctor.station.sim.gripper import SimGripper
from proctor.station.sim.scene import SimScene
from proctor.station.sim.world import SimParams, SimWorld

DEFAULT_CAMERA = CameraSettings(width=320, height=240, fps=15)
# The simulated cell's envelope (``proctor.station.envelope``) under ``[envelope]``: its
# own table (z = 0) and workspace (``world.Layout``: items stay pickable within
# x 0.25–0.80, |y| ≤ 0.45), and its own speed limit (``SimParams.v_max``, 1 m/s,
# which the demo policies' timings are calibrated to: at the real cell's 0.25 m/s
# they would be other policies). The demo policies lead the measured tool by up
# to ≈ 20 cm (a replanned move at 1 m/s plus the tracking lag). The simulated
# fingertips are the tool point exactly (``kinematics.TCP_OFFSET``: no extra).
SIM_ENVELOPE: dict[str, Any] = {
    "workspace_min": (0.25, -0.45, 0.0),
    "workspace_max": (0.80, 0.45, 0.65),
    "table_z": 0.0,
    # the fingertips touch the table below this (the world's floor contact)
    "table_margin_m": SimParams().floor_clearance,
    # the simulated fingers are a point (the world's contact model has no
    # corners or camera to keep off the table)
    "tool_points_m": (),
    "max_tool_speed": 1.0,
    "max_tool_rotation_speed": 2.5,
    "max_step_m": 0.3,
    "max_step_rad": 0.5,
}
_PARAM_FIELDS = {f.name for f in dataclasses.fields(SimParams)}
_SWITCHES = {f.name for f in dataclasses.fields(SimParams) if isinstance(f.default, bool)}


def sim_params(section: dict[str, Any]) -> tuple[str, SimParams]:
    section = dict(section)
    clock = section.pop("clock", "virtual")
    if clock not in ("virtual", "monotonic"):
        raise ConfigError(f"sim.clock: must be 'virtual' or 'monotonic', got {clock!r}")
    unknown = set(section) - _PARAM_FIELDS
    if unknown:
        raise ConfigError(
            f"sim: unknown setting(s) {', '.join(sorted(unknown))}; "
            f"known: clock, {', '.join(sorted(_PARAM_FIELDS))}"
        )
    values: dict[str, Any] = {}
    for name, value in section.items():
        if name in _SWITCHES:
            if not isinstance(value, bool):
                raise ConfigError(f"sim.{name}: must be true or false, got {value!r}")
            values[name] = value
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(f"sim.{name}: must be a positive number, got {value!r}")
        values[name] = float(value)
    return clock, SimParams(**values)


@PROFILES.register("sim")
def build(config: StationConfig, clock: Clock | None = None) -> Cell:
    clock_kind, params = sim_params(config.profile_section("sim"))
    if clock is None:
        clock = VirtualClock() if clock_kind == "virtual" else MonotonicClock()
    world = SimWorld(clock, params)
    cameras: dict[str, Camera] = {}
    for name in keys.CAMERAS:
        cs = camera_settings(config, name, DEFAULT_CAMERA)
        cameras[name] = SimCamera(
            world, SimCameraConfig(name=name, width=cs.width, height=cs.height, fps=cs.fps)
        )
    return Cell(
        profile="sim",
        clock=clock,
        arm=SimArm(world),
        gripper=SimGripper(world),
        cameras=cameras,
        scene=SimScene(world),
        envelope_defaults=dict(SIM_ENVELOPE),
    )
