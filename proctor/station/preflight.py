"""Pre-flight: is this cell fit to record an episode?

``proctor station check --profile real|twin`` builds the profile's cell,
then checks, one line each: disk space for the recordings, the kernel
clock's synchronisation, the arm (reachable, joints inside their limits,
state readable at the telemetry rate; a controller error or reflex is only a
warning: the daemon starts needing recovery), the gripper (activates, no
fault), and each camera (delivers frames at its rate and resolution). The
command exits non-zero when any check fails.

Thresholds come from the profile section's ``preflight`` table, e.g.::

    [real.preflight]
    min_free_gb = 50
    require_ntp = true
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import logging
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from proctor.core.errors import ConfigError, UsageError
from proctor.station.cell import Cell
from proctor.station.clock import Clock
from proctor.station.drivers.arm.base import ArmFault
from proctor.station.drivers.camera.base import Camera, CameraStalled, Frame
from proctor.station.drivers.gripper.base import GripperFault

log = logging.getLogger(__name__)


class CheckStatus(StrEnum):
    passed = "PASS"
    warning = "WARN"
    failed = "FAIL"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: CheckStatus
    detail: str

    def line(self) -> str:
        return f"{self.status.value}  {self.name:<16} {self.detail}"


@dataclass(frozen=True)
class PreflightSettings:
    # an hour of two 640×480 H.264 streams plus telemetry is ~2 GB; 20 GB
    # leaves a campaign day before the spool must be drained to the store
    min_free_gb: float = 20.0
    # episodes from several stations are compared on wall-clock dates and the
    # server orders uploads by them: an unsynchronised clock is a fault
    require_ntp: bool = True
    # the kernel's bound on its own clock error, beyond which NTP is not
    # doing its job (chrony keeps it to milliseconds on a LAN)
    max_clock_error_ms: float = 100.0
    # how long each camera is watched; a 30 fps camera shows 30 frames
    camera_sample_s: float = 1.0
    # a camera may deliver this fraction below its nominal rate (USB jitter)
    camera_rate_tolerance: float = 0.1
    # the arm's state must be readable at least this often (the telemetry
    # rate the recorder samples at)
    state_rate_hz: float = 100.0
    # arm state is read for this long to measure that rate
    state_sample_s: float = 0.3

    @classmethod
    def for_profile(cls, profile: str, section: dict[str, Any]) -> PreflightSettings:
        """Defaults per profile, overridden by ``[<profile>.preflight]``."""
        defaults: dict[str, Any] = {}
        if profile != "real":
            # simulated peers share this host's clock; nothing is compared across hosts
            defaults.update(require_ntp=False, min_free_gb=1.0)
        table = section.get("preflight", {})
        if not isinstance(table, dict):
            raise ConfigError(f"{profile}.preflight: must be a table")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(table) - set(known))
        if unknown:
            raise ConfigError(
                f"{profile}.preflight: unknown setting(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        for name, value in table.items():
            default = getattr(cls, name)
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise ConfigError(f"{profile}.preflight.{name}: must be true or false")
            elif isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{profile}.preflight.{name}: must be a positive number")
        return cls(**{**defaults, **table})


# -- individual checks -------------------------------------------------------


def check_disk(path: Path, settings: PreflightSettings) -> CheckResult:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free_gb = shutil.disk_usage(probe).free / 1e9
    status = CheckStatus.passed if free_gb >= settings.min_free_gb else CheckStatus.failed
    return CheckResult(
        "disk", status, f"{free_gb:.1f} GB free at {path} (need {settings.min_free_gb:g} GB)"
    )


# adjtimex(2): the kernel's view of its clock discipline
TIME_ERROR = 5  # clock not synchronised
STA_UNSYNC = 0x0040


class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class _Timex(ctypes.Structure):
    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time", _Timeval),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        ("_reserved", ctypes.c_int * 11),
    ]


@dataclass(frozen=True)
class KernelClock:
    synchronised: bool
    max_error_ms: float


def read_kernel_clock() -> KernelClock | None:
    """Read-only ``adjtimex`` (modes = 0): no privileges needed, nothing changed.
    ``None`` where the call does not exist (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        tx = _Timex()
        state = libc.adjtimex(ctypes.byref(tx))
    except (OSError, AttributeError):
        return None
    if state < 0:
        return None
    synced = state != TIME_ERROR and not tx.status & STA_UNSYNC
    return KernelClock(synchronised=synced, max_error_ms=tx.maxerror / 1000.0)


def check_clock(
    settings: PreflightSettings, profile: str, kernel: KernelClock | None = None
) -> CheckResult:
    kernel = kernel if kernel is not None else read_kernel_clock()
    soft = CheckStatus.failed if settings.require_ntp else CheckStatus.warning
    why_soft = "" if settings.require_ntp else f" (not required for {profile}: one host, one clock)"
    if kernel is None:
        return CheckResult("clock", soft, "cannot read the kernel's clock status" + why_soft)
    if not kernel.synchronised:
        return CheckResult(
            "clock",
            soft,
            f"not NTP-synchronised (kernel max error {kernel.max_error_ms / 1000:.1f} s)"
            + why_soft,
        )
    if kernel.max_error_ms > settings.max_clock_error_ms:
        return CheckResult(
            "clock",
            soft,
            f"NTP-synchronised but max error {kernel.max_error_ms:.0f} ms "
            f"(limit {settings.max_clock_error_ms:g} ms)" + why_soft,
        )
    return CheckResult(
        "clock", CheckStatus.passed, f"NTP-synchronised, max error {kernel.max_error_ms:.1f} ms"
    )


def check_arm(cell: Cell, settings: PreflightSettings) -> CheckResult:
    arm = cell.arm
    where = getattr(arm.config, "host", type(arm).__name__)
    try:
        if not arm.is_connected:
            arm.connect()
        clock = cell.clock
        t0 = clock.now()
        n = 0
        state = arm.read_state()
        while clock.now() - t0 < settings.state_sample_s:
            state = arm.read_state()
            n += 1
        rate = n / max(1e-9, clock.now() - t0)
    except ArmFault as exc:
        return CheckResult("arm", CheckStatus.failed, f"{where}: {exc}")
    lo, hi = np.asarray(arm.config.q_min), np.asarray(arm.config.q_max)
    margin = np.minimum(state.q - lo, hi - state.q)
    worst = int(np.argmin(margin))
    if margin[worst] < 0:
        return CheckResult(
            "arm",
            CheckStatus.failed,
            f"{where}: joint {worst + 1} at {state.q[worst]:.3f} rad is outside its limits "
            f"[{lo[worst]:.2f}, {hi[worst]:.2f}]",
        )
    if rate < settings.state_rate_hz:
        return CheckResult(
            "arm",
            CheckStatus.failed,
            f"{where}: state readable at only {rate:.0f} Hz (need {settings.state_rate_hz:g})",
        )
    if state.error is not None:
        # advisory, not a failure: an arm in reflex or error is recovered from
        # the console, which lives in the daemon. Failing here would keep the
        # daemon (whose unit runs this check first) from ever starting — a
        # restart loop with Recover out of reach. The daemon starts with the
        # arm marked as needing recovery and refuses to arm a run until then.
        return CheckResult(
            "arm",
            CheckStatus.warning,
            f"{where}: controller reports {state.error}; the station starts needing "
            "recovery (Recover on the console) and arms no run until then",
        )
    return CheckResult(
        "arm",
        CheckStatus.passed,
        f"{where}: reachable, no errors, joints inside limits "
        f"(closest: joint {worst + 1}, {margin[worst]:.2f} rad), state at {rate:.0f} Hz",
    )


def check_gripper(cell: Cell) -> CheckResult:
    gripper = cell.gripper
    where = getattr(gripper.config, "port", type(gripper).__name__)
    try:
        if not gripper.is_connected:
            gripper.connect()
        gripper.activate()
        state = gripper.read_state()
    except GripperFault as exc:
        return CheckResult("gripper", CheckStatus.failed, f"{where}: {exc}")
    if state.fault is not None:
        return CheckResult("gripper", CheckStatus.failed, f"{where}: {state.fault}")
    if not state.activated:
        return CheckResult("gripper", CheckStatus.failed, f"{where}: not activated")
    return CheckResult(
        "gripper",
        CheckStatus.passed,
        f"{where}: activated, no fault, fingers at {state.position:.2f}",
    )


def check_camera(
    name: str, camera: Camera, clock: Clock, settings: PreflightSettings
) -> CheckResult:
    c = camera.config
    label = f"camera {name}"
    try:
        if not camera.is_connected:
            camera.connect()
        camera.read(timeout_s=1.0)  # the first frame after a start can be stale: warm-up
        frames = [camera.read(timeout_s=1.0)]
        while frames[-1].t - frames[0].t < settings.camera_sample_s:
            frames.append(camera.read(timeout_s=1.0))
    except CameraStalled as exc:
        return CheckResult(label, CheckStatus.failed, f"stalled: {exc}")
    except Exception as exc:  # CameraUnavailable and the SDKs' own errors
        return CheckResult(label, CheckStatus.failed, f"{type(exc).__name__}: {exc}")
    h, w = frames[-1].image.shape[:2]
    span = frames[-1].t - frames[0].t
    rate = (len(frames) - 1) / span if span > 0 else 0.0
    problems = []
    if (w, h) != (c.width, c.height):
        problems.append(f"frames are {w}x{h}, expected {c.width}x{c.height}")
    if rate < (1 - settings.camera_rate_tolerance) * c.fps:
        problems.append(f"{rate:.1f} fps, expected {c.fps}")
    gaps = sum(max(0, b.index - a.index - 1) for a, b in itertools.pairwise(frames))
    detail = f"{w}x{h} at {rate:.1f} fps (expected {c.fps}), {gaps} frames lost by the device"
    spread = _device_clock_spread(frames)
    if spread is not None:
        detail += f", device clock steady to {1000 * spread:.1f} ms"
    if problems:
        return CheckResult(label, CheckStatus.failed, "; ".join(problems))
    return CheckResult(label, CheckStatus.passed, detail)


def _device_clock_spread(frames: list[Frame]) -> float | None:
    """How much the device→station offset wandered (s), within runs of
    increasing device time (a camera reset or a looping recording starts a
    new run)."""
    spreads: list[float] = []
    run: list[float] = []
    last: float | None = None
    for f in frames:
        if f.device_t is None:
            continue
        if last is not None and f.device_t <= last:
            if len(run) >= 2:
                spreads.append(max(run) - min(run))
            run = []
        run.append(f.t - f.device_t)
        last = f.device_t
    if len(run) >= 2:
        spreads.append(max(run) - min(run))
    return max(spreads) if spreads else None


def run_checks(
    cell: Cell, settings: PreflightSettings, disk_path: Path, profile: str
) -> Iterator[CheckResult]:
    """Every check, in order, each as soon as it is done."""
    yield check_disk(disk_path, settings)
    yield check_clock(settings, profile)
    yield check_arm(cell, settings)
    yield check_gripper(cell)
    for name, camera in cell.cameras.items():
        yield check_camera(name, camera, cell.clock, settings)


def preflight(
    cell: Cell,
    settings: PreflightSettings,
    disk_path: Path,
    profile: str,
    emit: Callable[[CheckResult], None] = lambda r: None,
) -> list[CheckResult]:
    results = []
    for result in run_checks(cell, settings, disk_path, profile):
        emit(result)
        results.append(result)
    return results


# -- the CLI command (registered on `proctor station`) ---------------------------


def check(
    ctx: typer.Context,
    profile: Annotated[
        str, typer.Option("--profile", help="Station profile: real or twin.")
    ] = "real",
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Station config file (TOML); defaults when omitted."),
    ] = None,
) -> None:
    """Pre-flight: arm, gripper, cameras, disk, clock — one line each; exits
    non-zero when any check fails."""
    from proctor.core.cli_context import cli_context
    from proctor.station.config import load_station_config, spool_root
    from proctor.station.profiles import build_cell

    if profile not in ("real", "twin"):
        raise UsageError(
            f"--profile: pre-flight checks a hardware cell (real or twin), not '{profile}'"
        )
    settings = cli_context(ctx).settings()
    cfg = load_station_config(config)
    pf = PreflightSettings.for_profile(profile, cfg.profile_section(profile))
    disk = spool_root(settings, cfg.name, cfg)
    typer.echo(f"pre-flight: station {cfg.name}, profile {profile}")
    cell = build_cell(profile, cfg)
    try:
        results = preflight(cell, pf, disk, profile, emit=lambda r: typer.echo(r.line()))
    finally:
        cell.close()
    failed = [r.name for r in results if r.status == CheckStatus.failed]
    if failed:
        typer.echo(f"pre-flight FAILED: {', '.join(failed)}")
        raise typer.Exit(1)
    typer.echo("pre-flight passed")
