"""The station's config file (``proctor station run --config FILE``).

One TOML file per station; every field has a default so a missing file means
"the simulated cell with defaults". Profile sections (``[sim]``, ``[twin]``,
``[real]``) are free-form here and validated by the profile that reads them.
Serial numbers, hosts and calibration belong in a config under ``deploy/``,
never in importable code.

Example::

    name = "cell-a"
    site = "lab-berlin"      # where the cell stands (results break down by it)
    cell_profile = "droid-fr3-2f85"  # what kind of cell: a campaign may accept some only
    control_hz = 15          # DROID policies are trained at 15 Hz
    telemetry_hz = 100

    [cameras.exterior]
    width = 640
    height = 480
    fps = 30

    [api]
    port = 8100

    [gripper]                # speed and force of the policy's gripper commands
    force = 0.5
    [gripper.objects.spoons] # an object type that needs its own
    force = 0.3
    [envelope]               # the limits every policy arm command is held to
    workspace_min = [0.25, -0.45, 0.0]
    workspace_max = [0.80, 0.45, 0.65]
    max_tool_speed = 0.25    # m/s, the same for every action space

    [sim]
    clock = "monotonic"      # real time, for a person at the console
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from proctor.core.errors import ConfigError
from proctor.core.labels import CellLabel

if TYPE_CHECKING:
    from proctor.core.settings import Settings


class CameraSettings(BaseModel):
    model_config = {"extra": "forbid"}

    width: int = Field(default=640, ge=16, le=4096)
    height: int = Field(default=480, ge=16, le=4096)
    fps: int = Field(default=30, ge=1, le=120)

    @field_validator("width", "height")
    @classmethod
    def _even(cls, value: int) -> int:
        # H.264 in yuv420p needs even dimensions
        if value % 2:
            raise ValueError(f"must be even for H.264 (yuv420p), got {value}")
        return value


class ApiSettings(BaseModel):
    model_config = {"extra": "forbid"}

    # loopback only: the console runs on the same machine (or through a proxy)
    host: str = "127.0.0.1"
    port: int = Field(default=8100, ge=0, le=65535)
    preview_fps: float = Field(default=5.0, gt=0, le=30)  # live preview over the WebSocket
    preview_jpeg_quality: int = Field(default=70, ge=10, le=95)


class GripStrength(BaseModel):
    """How hard and how fast the gripper closes on one object type (fractions
    of the gripper's range; a 2F-85 spans 20–150 mm/s and, by Robotiq's spec
    sheet, about 20–235 N). ``None``: the station's default."""

    model_config = {"extra": "forbid"}

    speed: float | None = Field(default=None, ge=0, le=1)
    force: float | None = Field(default=None, ge=0, le=1)


class GripSettings(BaseModel):
    """The gripper's speed and force for policy commands, per object type
    where the object needs its own (``[gripper.objects.<name>]``)."""

    model_config = {"extra": "forbid"}

    speed: float = Field(default=1.0, ge=0, le=1)
    # half force (about 127 N on a 2F-85): firm on a tote item, not crushing
    force: float = Field(default=0.5, ge=0, le=1)
    objects: dict[str, GripStrength] = Field(default_factory=dict)
    # the longest item any campaign on this cell hands the fingers (m): on a
    # commissioned cell, homing lifts the tool this much above the tote rims
    # (plus a margin) before it crosses, so a held item clears them
    longest_item_m: float = Field(default=0.25, gt=0.0, le=1.0)

    def for_object(self, name: str) -> tuple[float, float]:
        """(speed, force) for object type ``name``."""
        own = self.objects.get(name, GripStrength())
        return (
            self.speed if own.speed is None else own.speed,
            self.force if own.force is None else own.force,
        )


Vec3 = tuple[float, float, float]


class EnvelopeSettings(BaseModel):
    """``[envelope]``: the limits every arm command is held to before it is sent
    (``proctor.station.envelope``). The defaults are a real cell's before commissioning;
    a profile may supply its own (``Cell.envelope_defaults``: the simulated cell
    has its own geometry and speed), and whatever this section sets wins."""

    model_config = {"extra": "forbid"}

    # the box the tool (and the fingertips) must stay in, robot base frame, m
    workspace_min: Vec3 = (0.25, -0.45, 0.0)
    workspace_max: Vec3 = (0.80, 0.45, 0.65)
    # the table plane's height in the base frame, and how far above it the
    # fingertips must stay (m)
    table_z: float = 0.0
    table_margin_m: float = Field(default=0.01, ge=0.0, le=0.5)
    # how far the real fingertips reach beyond the end-effector point the arm
    # reports, along the tool's z axis (m): 0 when the controller's end effector
    # is the fingertip centre (commissioning checks that); e.g. 0.057 when Desk
    # still has the Franka Hand (10.34 cm) and a 2F-85 (≈ 16 cm) is mounted
    tcp_extra_m: float = Field(default=0.0, ge=0.0, le=0.5)
    # points of the gripper in the frame of the end effector the arm reports
    # (m; ``tcp_extra_m`` along z is added) that must stay above the table
    # plane by ``table_margin_m``, like the tool point: by default the corners
    # of the 2F-85's open fingers (±42.5 mm stroke and pad, either yaw) and a
    # wrist camera 7 cm off-axis, 10 cm above the fingertips (UNVERIFIED:
    # measure the mounted gripper and camera)
    tool_points_m: tuple[Vec3, ...] = (
        (0.05, 0.05, 0.0),
        (0.05, -0.05, 0.0),
        (-0.05, 0.05, 0.0),
        (-0.05, -0.05, 0.0),
        (0.07, 0.0, -0.10),
    )
    # how far above the table's margin the elbow and the wrist must stay as
    # PREDICTED for a Cartesian command (m): the envelope follows the tool's
    # commanded path by damped least squares from the measured joints, one of
    # the many joint paths that realise it; the arm's controller resolves the
    # redundancy its own way (undocumented for the FR3), so the prediction
    # keeps this much in hand (the spread between two resolutions over one
    # command's travel: up to 39 mm, measured in
    # tests/station/test_envelope_cartesian_body.py)
    cartesian_body_margin_m: float = Field(default=0.05, ge=0.0, le=0.5)
    # the fastest any joint may turn under a joint velocity command (rad/s):
    # bounds the self-motion (null space) that moves no tool point
    max_joint_speed: float = Field(default=1.0, gt=0.0, le=5.3)
    # a joint velocity row asking for more than this multiple of the arm's rated
    # joint velocities is not a velocity but a protocol fault of the policy
    joint_velocity_fault_multiple: float = Field(default=3.0, ge=1.0, le=100.0)
    # ONE tool speed cap for every action space (m/s), and one for rotation (rad/s)
    max_tool_speed: float = Field(default=0.25, gt=0.0, le=3.0)
    max_tool_rotation_speed: float = Field(default=1.0, gt=0.0, le=2.5)
    # how far a position target may lie from the MEASURED state (m of tool
    # travel; rad of any joint or of tool rotation); farther ones are shortened
    max_step_m: float = Field(default=0.05, gt=0.0, le=1.0)
    max_step_rad: float = Field(default=0.25, gt=0.0, le=3.2)
    # the tool's z axis stays within this angle of straight down (degrees)
    cone_deg: float = Field(default=45.0, gt=0.0, le=180.0)
    # an episode whose first target lies this far from the arm is stopped, not
    # clamped: a policy in the wrong frame or units (m; rad of any joint/rotation)
    first_jump_m: float = Field(default=0.25, gt=0.0)
    first_jump_rad: float = Field(default=1.0, gt=0.0)
    # a velocity command is predicted over this long (s): the arm's hold
    # (franky: velocity_hold_s = 0.2 s) plus its ramp down to rest
    velocity_horizon_s: float = Field(default=0.3, gt=0.0, le=5.0)
    # the measured tool farther than this outside the box stops the episode (m):
    # the backstop for a prediction the arm did not follow
    watch_tolerance_m: float = Field(default=0.03, gt=0.0, le=1.0)
    # … and the measured tool tilted farther than this past the cone (degrees):
    # an arm that cannot hold the commanded orientation (at the edge of its
    # reach) trades it for position
    watch_tilt_deg: float = Field(default=15.0, gt=0.0, le=180.0)

    @field_validator("workspace_max")
    @classmethod
    def _box(cls, value: Vec3, info: Any) -> Vec3:
        low = info.data.get("workspace_min")
        if low is not None and any(lo >= hi for lo, hi in zip(low, value, strict=True)):
            raise ValueError(f"must exceed workspace_min {tuple(low)} on every axis")
        return value


class WorkSettings(BaseModel):
    model_config = {"extra": "forbid"}

    # "adhoc" or "package.module:factory" (called with **options)
    source: str = "adhoc"
    options: dict[str, Any] = Field(default_factory=dict)


class UplinkSettings(BaseModel):
    """``[uplink]``: the station host talks to the server over the station API
    only (no database URL); its token comes from ``PROCTOR_STATION_TOKEN``,
    never from this file."""

    model_config = {"extra": "forbid"}

    # the server's origin, e.g. "https://proctor.example.org"
    server: str = Field(min_length=1, max_length=512, pattern=r"^https?://[^\s/]+/?$")
    # the campaign's id (a TOML integer) or name
    campaign: int | str = Field(union_mode="left_to_right")
    # how often the station says hello (the server may ask for less)
    heartbeat_s: float = Field(default=10.0, gt=0, le=3600)
    timeout_s: float = Field(default=15.0, gt=0, le=600)


class StationConfig(BaseModel):
    model_config = {"extra": "forbid"}

    name: str = Field(default="station-1", min_length=1, max_length=64)
    # where the cell stands and what kind of cell it is; handed to a campaign work
    # source, which registers them with the station (None: not declared)
    site: CellLabel | None = None
    cell_profile: CellLabel | None = None
    # policy action steps per second; DROID-trained policies expect 15 Hz
    control_hz: float = Field(default=15.0, gt=0, le=1000)
    # state samples per second; the annotator needs ≥ 100 Hz to time releases to 10 ms
    telemetry_hz: float = Field(default=100.0, ge=100, le=1000)
    # actions of each chunk executed open-loop before asking again (≤ the chunk length)
    open_loop_steps: int = Field(default=8, ge=1, le=1000)
    # wall-clock seconds one policy reply may take before the arm is stopped
    policy_timeout_s: float = Field(default=5.0, gt=0, le=600)
    policy_connect_timeout_s: float = Field(default=10.0, gt=0, le=600)
    # the largest WebSocket message a policy server may send (bytes). A reply is an
    # action chunk (kilobytes) and metadata less; without a cap one frame from a
    # broken or hostile server could take the station's memory. Larger = malformed.
    policy_max_message_bytes: int = Field(default=64 * 2**20, ge=2**16, le=2**31)
    # control steps between sending the next request and needing its reply, for
    # velocity action spaces: the request goes out while the current chunk's last
    # steps run, so the arm keeps moving (≥ the policy's latency in control
    # periods; 0 = ask only after the chunk is done, the arm stopped meanwhile)
    policy_lookahead_steps: int = Field(default=1, ge=0, le=100)
    # the console-link deadman (proctor.station.deadman): an episode started from the
    # operator console stops (operator stop) once the console has sent no
    # heartbeat for this long (s; the page beats every 0.5 s); 0 = off
    console_deadman_s: float = Field(default=2.0, ge=0, le=60)
    # image size sent to openpi-dialect servers (RoboArena servers declare theirs), (H, W)
    policy_image_size: tuple[int, int] = (224, 224)
    # telemetry and frame tables are flushed in segments of this much station time:
    # a crash loses at most one segment
    segment_s: float = Field(default=2.0, gt=0, le=60)
    # per-camera overrides; the profile supplies the defaults
    cameras: dict[str, CameraSettings] = Field(default_factory=dict)
    api: ApiSettings = Field(default_factory=ApiSettings)
    gripper: GripSettings = Field(default_factory=GripSettings)
    envelope: EnvelopeSettings = Field(default_factory=EnvelopeSettings)
    work: WorkSettings = Field(default_factory=WorkSettings)
    # the server link of a station host without a database (None: the daemon
    # writes to the configured database, as on a single-host install)
    uplink: UplinkSettings | None = None
    # where episodes are recorded before they reach the artifact store;
    # default: <data dir>/station/<name>/spool
    spool_dir: Path | None = None
    # the commissioned-cell file (``proctor station commission`` writes it):
    # table plane, totes, workspace box, home pose, TCP and payload, camera
    # references; the real and twin profiles configure the arm from it
    commissioned: Path | None = None
    sim: dict[str, Any] = Field(default_factory=dict)
    twin: dict[str, Any] = Field(default_factory=dict)
    real: dict[str, Any] = Field(default_factory=dict)

    def profile_section(self, profile: str) -> dict[str, Any]:
        return dict(getattr(self, profile, {}) or {})


def load_station_config(path: Path | None = None, **overrides: Any) -> StationConfig:
    """Parse and validate the station config; problems become one ConfigError
    line naming each field."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"station config {path}: not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"station config {path}: invalid TOML: {exc}") from None
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return StationConfig(**data)
    except ValidationError as exc:
        where = f"station config {path}" if path else "station config"
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"{where}: {problems}") from None


def spool_root(settings: Settings, station_name: str, config: StationConfig) -> Path:
    """Where a station spools its recordings before they are stored: the
    config's ``spool_dir``, else a folder of its own in the data folder."""
    if config.spool_dir is not None:
        return Path(config.spool_dir)
    return Path(settings.data_dir) / "station" / station_name / "spool"
