"""Profile ``real``: the station's hardware — Franka FR3 through franky,
Robotiq 2F-85 over Modbus RTU, RealSense (or UVC) cameras.

Its ``[real]`` section (addresses and serial numbers belong in the station's
deploy config, never in code)::

    [real.arm]                      # the driver's config fields
    driver = "franky"               # optional: the default (any name in ARMS)
    host = "172.16.0.2"
    relative_dynamics_factor = 0.2

    [real.gripper]                  # the driver's config fields
    driver = "robotiq_2f85"         # optional: the default (any name in GRIPPERS)
    port = "/dev/serial/by-id/usb-FTDI_USB_RS485-if00-port0"

    [real.cameras.exterior]         # driver + that driver's config fields
    driver = "realsense"
    serial = "123456789012"

    [real.cameras.wrist]
    driver = "uvc"
    device = "/dev/v4l/by-id/usb-Wrist_Camera-video-index0"

    [real.preflight]                # read by `proctor station check`
    min_free_gb = 50

Camera sizes and rates come from ``[cameras.<name>]`` (default 640×480 at
30 fps), as for every profile. The config's ``commissioned`` file
(``proctor.station.commissioning.cell_file``) fixes the arm's home pose, workspace box, TCP and
payload; ``realtime`` is always ``enforce`` here.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from proctor.core.clock import Clock, MonotonicClock
from proctor.core.errors import ConfigError
from proctor.core.recording import keys
from proctor.station.cell import Cell
from proctor.station.commissioning.cell_file import (
    HOME_CLEARANCE_MARGIN_M,
    CommissionedCell,
    load_commissioned,
)
from proctor.station.config import CameraSettings, StationConfig
from proctor.station.drivers.arm.base import ARMS, Arm, ArmConfig
from proctor.station.drivers.camera.base import CAMERAS, Camera
from proctor.station.drivers.gripper.base import GRIPPERS, Gripper
from proctor.station.profiles import PROFILES, camera_settings

DEFAULT_CAMERA = CameraSettings(width=640, height=480, fps=30)
# the drivers a [real.arm] / [real.gripper] table gets when it names none
# (``driver = "<name>"``: any registered in ARMS / GRIPPERS)
ARM_DRIVER = "franky"
GRIPPER_DRIVER = "robotiq_2f85"
# keys of a profile section that are not a driver's (they belong to pre-flight)
PREFLIGHT = "preflight"
# camera fields owned by [cameras.<name>], not by the profile's camera table
CAMERA_SIZE_FIELDS = ("name", "width", "height", "fps")

C = TypeVar("C")


def _check_type(where: str, name: str, value: Any, annotation: Any) -> Any:
    """Light type check for TOML values against a dataclass field's annotation."""
    hint = annotation if not isinstance(annotation, str) else None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        hint, origin = options[0], typing.get_origin(options[0])
    ok = True
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif hint is str:
        ok = isinstance(value, str)
    elif origin is tuple:
        ok = isinstance(value, list | tuple)
        value = tuple(value) if ok else value
    if not ok:
        raise ConfigError(
            f"{where}.{name}: expected {getattr(hint, '__name__', hint)}, got {value!r}"
        )
    return value


def driver_config(cls: type[C], section: dict[str, Any], where: str, **fixed: Any) -> C:
    """Build a driver's config dataclass from a TOML table: unknown keys and
    wrong types are refused with the field named; ``fixed`` values are the
    profile's and may not be overridden."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    clash = sorted(set(section) & set(fixed))
    if clash:
        raise ConfigError(f"{where}: {', '.join(clash)} is set by the profile, not the config")
    unknown = sorted(set(section) - set(fields))
    if unknown:
        known = ", ".join(sorted(n for n in fields if n not in fixed))
        raise ConfigError(f"{where}: unknown setting(s) {', '.join(unknown)}; known: {known}")
    values = {n: _check_type(where, n, v, hints.get(n)) for n, v in section.items()}
    try:
        return cls(**values, **fixed)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _table(section: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = section.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where}.{key}: must be a table")
    return dict(value)


def _driver_name(section: dict[str, Any], where: str, default: str) -> str:
    """The driver a table names (``driver = "…"``, removed from it), else ``default``."""
    name = section.pop("driver", default)
    if not isinstance(name, str):
        raise ConfigError(f"{where}.driver: must be a driver's name, got {name!r}")
    return name


def _configurable(cls: Any, name: str, where: str) -> Any:
    # a driver built from a config table (the simulated cell's are built by
    # their profile from the simulated world, never from a hardware table)
    if not hasattr(cls, "config_class"):
        raise ConfigError(f"{where}.driver: '{name}' cannot be configured from this table")
    return cls


def build_arm(section: dict[str, Any], where: str, clock: Clock, **fixed: Any) -> Arm:
    section = dict(section)
    name = _driver_name(section, where, ARM_DRIVER)
    cls = _configurable(ARMS.get(name), name, where)
    config = driver_config(cls.config_class, section, where, **fixed)  # type: ignore[attr-defined]
    return cls(config, clock=clock)  # type: ignore[call-arg]


def build_gripper(section: dict[str, Any], where: str, clock: Clock, **fixed: Any) -> Gripper:
    section = dict(section)
    name = _driver_name(section, where, GRIPPER_DRIVER)
    cls = _configurable(GRIPPERS.get(name), name, where)
    config = driver_config(cls.config_class, section, where, **fixed)  # type: ignore[attr-defined]
    return cls(config, clock=clock)  # type: ignore[call-arg]


def build_camera(
    name: str,
    section: dict[str, Any],
    where: str,
    settings: CameraSettings,
    clock: Clock,
    **fixed: Any,
) -> Camera:
    section = dict(section)
    driver = section.pop("driver", None)
    if not isinstance(driver, str):
        raise ConfigError(f"{where}.driver: name the camera driver ({', '.join(CAMERAS.names())})")
    sized = sorted(set(section) & set(CAMERA_SIZE_FIELDS))
    if sized:
        raise ConfigError(
            f"{where}: {', '.join(sized)} belong in [cameras.{name}], which every profile reads"
        )
    cls = CAMERAS.get(driver)
    config = driver_config(
        cls.config_class,  # type: ignore[attr-defined]
        section,
        where,
        name=name,
        width=settings.width,
        height=settings.height,
        fps=settings.fps,
        **fixed,
    )
    return cls(config, clock=clock)  # type: ignore[call-arg]


def check_section(section: dict[str, Any], where: str, allowed: set[str]) -> None:
    unknown = sorted(set(section) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(allowed))}"
        )


# the arm settings a commissioned cell fixes: set once, by measurement
COMMISSIONED_ARM_FIELDS = (
    "home_q",
    "workspace_min",
    "workspace_max",
    "tcp",
    "payload_mass",
    "payload_com",
    "payload_inertia",
)


def commissioned_arm(
    config: StationConfig, arm_section: dict[str, Any], where: str
) -> tuple[CommissionedCell | None, dict[str, Any]]:
    """The commissioned cell named by the config, and the arm settings it
    fixes (which the profile's arm table may then not set)."""
    if config.commissioned is None:
        return None, {}
    limits = ArmConfig()
    q_min = tuple(arm_section.get("q_min", limits.q_min))
    q_max = tuple(arm_section.get("q_max", limits.q_max))
    cell = load_commissioned(Path(config.commissioned), q_min, q_max)
    clash = sorted(set(arm_section) & set(COMMISSIONED_ARM_FIELDS))
    if clash:
        raise ConfigError(
            f"{where}: {', '.join(clash)} is set by the commissioned cell "
            f"({config.commissioned}), not the config"
        )
    fixed: dict[str, Any] = {}
    clearance = cell.home_clearance_z(config.gripper.longest_item_m)
    given = arm_section.get("home_clearance_z_m")
    if given is None:
        fixed["home_clearance_z_m"] = clearance
    elif not isinstance(given, int | float) or given < clearance:
        raise ConfigError(
            f"{where}.home_clearance_z_m: {given} m is below what the commissioned cell "
            f"needs, {clearance:.3f} m (the highest tote rim + "
            f"{HOME_CLEARANCE_MARGIN_M:g} m + gripper.longest_item_m)"
        )
    return cell, fixed | {
        "home_q": cell.home_q,
        "workspace_min": cell.workspace_min,
        "workspace_max": cell.workspace_max,
        "tcp": cell.tcp.as_tuple(),
        "payload_mass": cell.payload.mass,
        "payload_com": cell.payload.com,
        "payload_inertia": cell.payload.inertia,
    }


def commissioned_gripper(
    config: StationConfig,
    cell: CommissionedCell | None,
    gripper_section: dict[str, Any],
    where: str,
) -> dict[str, Any]:
    """The gripper settings a commissioned cell fixes: the 2F-85's
    fully-closed reading, where commissioning measured it (the profile's
    gripper table may then not set it, as the arm's commissioned fields)."""
    if cell is None or cell.gripper_closed_counts is None:
        return {}
    if "closed_counts" in gripper_section:
        raise ConfigError(
            f"{where}: closed_counts is set by the commissioned cell "
            f"({config.commissioned}), not the config"
        )
    return {"closed_counts": cell.gripper_closed_counts}


def commissioned_envelope(config: StationConfig, cell: CommissionedCell | None) -> dict[str, Any]:
    """The envelope's limits on a commissioned cell (``Cell.envelope_defaults``):
    the measured box and table (hardware review #2). ``[envelope]`` may
    narrow them, never widen them: a wider box or a lower table is refused
    by name. Without a commissioned cell: none (the config's, then the
    defaults', as before commissioning)."""
    if cell is None:
        return {}
    limits = cell.envelope_limits()
    asked = config.envelope.model_dump(exclude_unset=True)
    lo, hi = limits["workspace_min"], limits["workspace_max"]
    for name, outside in (
        ("workspace_min", lambda v: any(a < b - 1e-9 for a, b in zip(v, lo, strict=True))),
        ("workspace_max", lambda v: any(a > b + 1e-9 for a, b in zip(v, hi, strict=True))),
    ):
        if name in asked and outside(asked[name]):
            raise ConfigError(
                f"envelope.{name}: {list(asked[name])} reaches outside the commissioned "
                f"box {list(lo)} … {list(hi)} ({config.commissioned}); [envelope] may "
                "only narrow it"
            )
    if "table_z" in asked and asked["table_z"] < limits["table_z"] - 1e-9:
        raise ConfigError(
            f"envelope.table_z: {asked['table_z']} m is below the commissioned table "
            f"({limits['table_z']:.4f} m under the box); [envelope] may only raise it"
        )
    return limits


@PROFILES.register("real")
def build(config: StationConfig, clock: Clock | None = None) -> Cell:
    section = config.profile_section("real")
    check_section(section, "real", {"arm", "gripper", "cameras", PREFLIGHT})
    clock = clock or MonotonicClock()
    arm_section = _table(section, "arm", "real")
    if "host" not in arm_section:
        raise ConfigError("real.arm.host: the arm's FCI address is required")
    gripper_section = _table(section, "gripper", "real")
    if "port" not in gripper_section:
        raise ConfigError("real.gripper.port: the gripper's serial port is required")
    cameras_section = _table(section, "cameras", "real")
    cameras: dict[str, Camera] = {}
    for name in keys.CAMERAS:
        if name not in cameras_section:
            raise ConfigError(f"real.cameras.{name}: every camera needs a table (driver, …)")
        cameras[name] = build_camera(
            name,
            _table(cameras_section, name, "real.cameras"),
            f"real.cameras.{name}",
            camera_settings(config, name, DEFAULT_CAMERA),
            clock,
        )
    extra = sorted(set(cameras_section) - set(keys.CAMERAS))
    if extra:
        raise ConfigError(f"real.cameras: unknown camera(s) {', '.join(extra)}")
    commissioned, fixed = commissioned_arm(config, arm_section, "real.arm")
    return Cell(
        profile="real",
        clock=clock,
        # libfranka's realtime check stays on for the real arm (review #9):
        # "ignore" is for franky-sim and development machines only
        arm=build_arm(
            arm_section,
            "real.arm",
            clock,
            realtime="enforce",
            # homing is held to the cap every policy command is
            home_max_tool_speed=config.envelope.max_tool_speed,
            **fixed,
        ),
        gripper=build_gripper(
            gripper_section,
            "real.gripper",
            clock,
            **commissioned_gripper(config, commissioned, gripper_section, "real.gripper"),
        ),
        cameras=cameras,
        commissioned=commissioned,
        envelope_defaults=commissioned_envelope(config, commissioned),
    )
