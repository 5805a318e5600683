"""Profile ``twin``: the real drivers against simulators that speak the real
protocols, all on this machine.

* arm — ``FrankyArm`` → franky-sim (MuJoCo behind libfranka's protocol) on a
  loopback address, in its own process;
* gripper — ``RobotiqGripper`` → the simulated 2F-85 (pymodbus server) over a
  socat pty pair carrying Modbus RTU;
* cameras — ``RealSenseCamera`` → ``rs.pipeline`` playing ``.db3``
  recordings in real time, looped (a synthetic test pattern made with the
  SDK's software device, unless you name recordings of your own).

Building the cell starts the peers (the drivers need their addresses); the
cell's closers stop them. Its ``[twin]`` section::

    [twin]
    workdir = "/var/tmp/proctor-twin"   # ptys, peer logs, recordings (default: a temp dir)
    gripper_activation_s = 1.0          # how long the simulated 2F-85 takes to activate
    recording_s = 3.0                   # length of each generated camera loop

    [twin.arm]                          # FrankyArmConfig fields (not host/realtime,
                                        # nor what the `commissioned` file fixes)
    relative_dynamics_factor = 0.2

    [twin.gripper]                      # RobotiqGripperConfig fields (not port)
    [twin.cameras.exterior]             # RealSenseCameraConfig fields, e.g. a recording
    playback_file = "/data/exterior.db3"
    [twin.preflight]                    # read by `proctor station check`
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from proctor.core.clock import MonotonicClock
from proctor.core.errors import ConfigError
from proctor.core.recording import keys
from proctor.station.cell import Cell
from proctor.station.config import StationConfig
from proctor.station.drivers.arm.base import ArmConfig
from proctor.station.profiles import PROFILES, camera_settings
from proctor.station.profiles.real import (
    DEFAULT_CAMERA,
    PREFLIGHT,
    _table,
    build_arm,
    build_camera,
    build_gripper,
    check_section,
    commissioned_arm,
    commissioned_envelope,
    commissioned_gripper,
)
from proctor.station.twin.peers import FrankySimProcess, GripperSimProcess, PeerError, SocatPtyPair

log = logging.getLogger(__name__)

CAMERA_DRIVER = "realsense"
RECORDING_TIMEOUT_S = 120.0
# the simulated 2F-85 is a Python process on a shared, possibly busy host, not
# a microcontroller: give its answers more time than the real line needs
TWIN_GRIPPER_DEFAULTS = {"timeout_s": 0.15, "stale_after_s": 0.6}


def _positive(section: dict[str, Any], name: str, default: float) -> float:
    value = section.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"twin.{name}: must be a positive number, got {value!r}")
    return float(value)


class TwinPeers:
    """The twin's protocol peers, started together and stopped in reverse."""

    def __init__(self, workdir: Path, temporary: bool) -> None:
        self.workdir = workdir
        self.temporary = temporary
        self.franky_sim: FrankySimProcess | None = None
        self.socat: SocatPtyPair | None = None
        self.gripper_sim: GripperSimProcess | None = None
        self.recorders: list[tuple[subprocess.Popen[bytes], Path]] = []

    def stop(self) -> None:
        for proc, path in self.recorders:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                path.unlink(missing_ok=True)  # half a recording must not be reused
        for peer in (self.gripper_sim, self.socat, self.franky_sim):
            if peer is not None:
                try:
                    peer.stop()
                except Exception:
                    log.error("stopping %s failed", peer.name, exc_info=True)
        if self.temporary:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _start_recording(path: Path, width: int, height: int, fps: int, frames: int, serial: str):  # type: ignore[no-untyped-def]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proctor.station.drivers.camera.realsense_record",
            str(path),
            f"--width={width}",
            f"--height={height}",
            f"--fps={fps}",
            f"--frames={frames}",
            f"--serial={serial}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _validate(
    config: StationConfig,
    arm_section: dict[str, Any],
    gripper_section: dict[str, Any],
    cameras_section: dict[str, Any],
) -> None:
    clock = MonotonicClock()
    build_arm(arm_section, "twin.arm", clock, host="127.0.0.1", realtime="ignore")
    build_gripper(gripper_section, "twin.gripper", clock, port="/dev/null")
    for name in keys.CAMERAS:
        cam = _table(cameras_section, name, "twin.cameras")
        cam.pop("playback_file", None)
        build_camera(
            name,
            {"driver": CAMERA_DRIVER, **cam},
            f"twin.cameras.{name}",
            camera_settings(config, name, DEFAULT_CAMERA),
            clock,
            playback_file="unused.db3",
            playback_real_time=True,
            repeat_playback=True,
        )


@PROFILES.register("twin")
def build(config: StationConfig) -> Cell:
    section = config.profile_section("twin")
    check_section(
        section,
        "twin",
        {"workdir", "gripper_activation_s", "recording_s", "arm", "gripper", "cameras", PREFLIGHT},
    )
    activation_s = _positive(section, "gripper_activation_s", 1.0)
    recording_s = _positive(section, "recording_s", 3.0)
    arm_section = _table(section, "arm", "twin")
    gripper_section = {**TWIN_GRIPPER_DEFAULTS, **_table(section, "gripper", "twin")}
    cameras_section = _table(section, "cameras", "twin")
    extra = sorted(set(cameras_section) - set(keys.CAMERAS))
    if extra:
        raise ConfigError(f"twin.cameras: unknown camera(s) {', '.join(extra)}")
    commissioned, fixed = commissioned_arm(config, arm_section, "twin.arm")
    gripper_fixed = commissioned_gripper(
        config, commissioned, _table(section, "gripper", "twin"), "twin.gripper"
    )
    home_q = fixed.get("home_q", arm_section.get("home_q", ArmConfig.home_q))
    # refuse a bad config before any peer starts (placeholders for what the
    # peers will provide)
    _validate(
        config, {**arm_section, **fixed}, {**gripper_section, **gripper_fixed}, cameras_section
    )

    if "workdir" in section:
        workdir, temporary = Path(str(section["workdir"])).expanduser(), False
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir, temporary = Path(tempfile.mkdtemp(prefix="proctor-twin-")), True
    clock = MonotonicClock()
    peers = TwinPeers(workdir, temporary)
    try:
        # camera loops: recorded in real time (that is how playback paces),
        # in parallel with the other peers' start-up; reused when present
        recordings: dict[str, Path] = {}
        pending: list[tuple[str, Path, subprocess.Popen[bytes]]] = []
        for name in keys.CAMERAS:
            cam = _table(cameras_section, name, "twin.cameras")
            if "playback_file" in cam:
                recordings[name] = Path(str(cam["playback_file"]))
                continue
            s = camera_settings(config, name, DEFAULT_CAMERA)
            frames = max(2, round(recording_s * s.fps))
            path = workdir / f"{name}-{s.width}x{s.height}-{s.fps}fps-{frames}.db3"
            recordings[name] = path
            if not path.is_file():
                serial = str(cam.get("serial", f"TWIN-{name.upper()}"))
                proc = _start_recording(path, s.width, s.height, s.fps, frames, serial)
                peers.recorders.append((proc, path))
                pending.append((name, path, proc))

        peers.franky_sim = FrankySimProcess(
            initial_q=home_q, log_path=workdir / "franky-sim.log", clock=clock
        )
        host = peers.franky_sim.start()
        peers.socat = SocatPtyPair(workdir / "ttyGRIPPER", workdir / "ttyGRIPPER-device", clock)
        peers.socat.start()
        peers.gripper_sim = GripperSimProcess(
            peers.socat.device_end,
            activation_s=activation_s,
            log_path=workdir / "gripper-sim.log",
            clock=clock,
        )
        peers.gripper_sim.start()

        for name, path, proc in pending:
            try:
                _, err = proc.communicate(timeout=RECORDING_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise PeerError(f"recording the {name} camera loop timed out") from None
            if proc.returncode != 0:
                path.unlink(missing_ok=True)
                tail = err.decode(errors="replace").strip().splitlines()[-3:]
                raise PeerError(f"recording the {name} camera loop failed: {' | '.join(tail)}")

        cameras = {}
        for name in keys.CAMERAS:
            cam = _table(cameras_section, name, "twin.cameras")
            cam.pop("playback_file", None)
            cameras[name] = build_camera(
                name,
                {"driver": CAMERA_DRIVER, **cam},
                f"twin.cameras.{name}",
                camera_settings(config, name, DEFAULT_CAMERA),
                clock,
                playback_file=str(recordings[name]),
                playback_real_time=True,
                repeat_playback=True,
            )
        arm = build_arm(
            arm_section,
            "twin.arm",
            clock,
            host=host,
            realtime="ignore",
            home_max_tool_speed=config.envelope.max_tool_speed,
            **fixed,
        )
        gripper = build_gripper(
            gripper_section,
            "twin.gripper",
            clock,
            port=str(peers.socat.driver_end),
            **gripper_fixed,
        )
    except BaseException:
        peers.stop()
        raise
    return Cell(
        profile="twin",
        clock=clock,
        arm=arm,
        gripper=gripper,
        cameras=cameras,
        commissioned=commissioned,
        envelope_defaults=commissioned_envelope(config, commissioned),
        closers=[peers.stop],
    )
