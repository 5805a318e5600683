"""Pre-flight: is this cell fit to record an episode?

``proctor station check --profile real|twin`` builds the profile's cell,
then checks, one line each: disk space for the recordings, the kernel
clock's synchronisation, the arm (reachable, joints inside their limits,
state readable at the telemetry rate; a controller error or reflex is only a
warning: the daemon starts needing recovery), then the checks only the arm's
driver knows (``Arm.preflight_checks``: the franky driver's are libfranka's,
``proctor.station.drivers.arm.franky_checks``), the gripper (status only, never
activated here: activated and no fault; its serial line's latency timer and
round trip), and each camera (delivers frames at its rate and resolution). The
command exits non-zero when any check fails. With ``--daemon-start`` (the
daemon unit's ``ExecStartPre``) an absent camera is only a warning: the daemon
starts without it and arms no run until its camera hub has it back.

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
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from proctor.core.clock import Clock
from proctor.core.errors import ConfigError, UsageError
from proctor.station.cell import Cell
from proctor.station.drivers.arm.base import ArmFault, ControllerReport, ask_controller
from proctor.station.drivers.camera.base import Camera, CameraStalled, Frame
from proctor.station.drivers.checks import CheckResult, CheckStatus
from proctor.station.drivers.gripper.base import GripperFault
from proctor.station.drivers.gripper.serial_line import latency_timer
from proctor.station.framing import image_similarity, load_image

log = logging.getLogger(__name__)


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
    # libfranka's 1 kHz loop needs a PREEMPT_RT kernel (franky's installation
    # guide; review #9): a stock kernel FAILs on the real cell, WARNs elsewhere
    require_realtime: bool = True
    # where the kernel's sysfs is read (tests point it at a fake tree)
    sysfs_root: str = "/sys"
    # the short low-speed test motion: last joint there and back by this much
    test_motion: bool = True
    test_motion_rad: float = 0.05
    test_motion_timeout_s: float = 5.0
    # libfranka's control_command_success_rate while the test motion runs
    # (the fraction of the last 100 commands that reached the controller)
    min_command_success_rate: float = 0.95
    # how long the operator has to press, then release, the enabling device
    enabling_device_timeout_s: float = 30.0
    # today's frame against the commissioned reference image (correlation of
    # the downscaled grey images, 1 = identical): a moved camera scores low
    min_framing_similarity: float = 0.6
    # an FTDI adapter's latency timer, ms (its default 16 ms makes every Modbus
    # answer up to 16 ms late; deploy's udev rule sets 1)
    max_serial_latency_timer_ms: float = 1.0
    # gripper status exchanges timed, and the median round trip allowed: 19 +
    # 11 bytes at 115200 baud take ~2.6 ms, plus ~1 ms of latency timer and
    # the gripper's own answer time
    gripper_round_trips: int = 20
    max_gripper_round_trip_ms: float = 10.0
    # camera frames stamped by the camera's clock (RealSense hardware_clock or
    # global_time), not on arrival (system_time: about a frame late)
    require_device_timestamps: bool = True
    # a camera on a USB 2 link (a long wrist cable, a hub) fails pre-flight
    require_usb3: bool = True

    @classmethod
    def for_profile(cls, profile: str, section: dict[str, Any]) -> PreflightSettings:
        """Defaults per profile, overridden by ``[<profile>.preflight]``."""
        defaults: dict[str, Any] = {}
        if profile != "real":
            # simulated peers share this host's clock; nothing is compared across
            # hosts; franky-sim keeps no deadlines, so no realtime kernel is needed;
            # a pty to a simulator answers from a process that shares the CPU
            defaults.update(
                require_ntp=False,
                min_free_gb=1.0,
                require_realtime=False,
                max_gripper_round_trip_ms=100.0,
            )
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
            elif isinstance(default, str):
                if not isinstance(value, str) or not value:
                    raise ConfigError(f"{profile}.preflight.{name}: must be a path")
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
    """Status only: pre-flight never activates (activation sweeps the fingers,
    and pre-flight runs before every daemon start)."""
    gripper = cell.gripper
    where = getattr(gripper.config, "port", type(gripper).__name__)
    try:
        if not gripper.is_connected:
            gripper.connect()
        needs = gripper.needs_activation()
        state = gripper.read_state()
    except GripperFault as exc:
        return CheckResult("gripper", CheckStatus.failed, f"{where}: {exc}")
    if state.fault is not None and needs:
        return CheckResult(
            "gripper",
            CheckStatus.failed,
            f"{where}: {state.fault} (hands clear, then `proctor station gripper-activate`)",
        )
    if state.fault is not None:
        return CheckResult("gripper", CheckStatus.warning, f"{where}: {state.fault}")
    if needs:
        return CheckResult(
            "gripper",
            CheckStatus.warning,
            f"{where}: not activated; the station activates it when it starts "
            "(the fingers sweep fully open and closed)",
        )
    return CheckResult(
        "gripper",
        CheckStatus.passed,
        f"{where}: activated, no fault, fingers at {state.position:.2f}",
    )


# the udev rule that sets the adapter's latency timer (deploy/README.md)
LATENCY_UDEV_RULE = "deploy/udev/99-proctor-robotiq.rules"


def check_gripper_line(cell: Cell, settings: PreflightSettings) -> CheckResult:
    """The serial adapter's latency timer (udev sets it to 1 ms) and the
    measured status round trip; a driver without a bus is skipped."""
    gripper = cell.gripper
    port = getattr(gripper.config, "port", None)
    measure = getattr(gripper, "measure_round_trip", None)
    if port is None or measure is None:
        return CheckResult("gripper line", CheckStatus.passed, "no serial line (simulated)")
    timer = latency_timer(port)
    problems = []
    if timer.ms is None:
        detail = f"latency timer: skipped ({timer.why_none})"
    else:
        detail = f"{timer.tty} latency timer {timer.ms} ms"
        if timer.ms > settings.max_serial_latency_timer_ms:
            problems.append(
                f"{timer.tty} latency timer is {timer.ms} ms "
                f"(need <= {settings.max_serial_latency_timer_ms:g}; install "
                f"{LATENCY_UDEV_RULE} and replug the adapter)"
            )
    if not gripper.is_connected:
        # the gripper check has said why: nothing to time
        if problems:
            return CheckResult("gripper line", CheckStatus.failed, "; ".join(problems))
        return CheckResult("gripper line", CheckStatus.warning, detail + "; round trip not timed")
    try:
        rtts = sorted(measure(settings.gripper_round_trips))
    except GripperFault as exc:
        return CheckResult("gripper line", CheckStatus.failed, f"{port}: {exc}")
    if rtts:
        median_ms, worst_ms = 1000 * rtts[len(rtts) // 2], 1000 * rtts[-1]
        detail += f", status round trip {median_ms:.1f} ms median, {worst_ms:.1f} ms max"
        if median_ms > settings.max_gripper_round_trip_ms:
            problems.append(
                f"status round trip {median_ms:.1f} ms median "
                f"(limit {settings.max_gripper_round_trip_ms:g} ms)"
            )
    if problems:
        return CheckResult("gripper line", CheckStatus.failed, "; ".join(problems))
    return CheckResult("gripper line", CheckStatus.passed, detail)


# what the daemon does with a camera that is absent at its start (the warning's tail)
ABSENT_AT_START = (
    "; the daemon starts without it, keeps trying it, and arms no run until it delivers"
)


def check_camera(
    name: str,
    camera: Camera,
    clock: Clock,
    settings: PreflightSettings,
    absent: CheckStatus = CheckStatus.failed,
) -> CheckResult:
    """Frames at the configured rate and size. A camera that does not connect
    or delivers nothing is ``absent`` (a failure, or a warning before the
    daemon starts: its camera hub connects it when it appears); a wrong size
    or rate fails either way (reconnecting does not change them)."""
    c = camera.config
    label = f"camera {name}"
    tail = ABSENT_AT_START if absent is CheckStatus.warning else ""
    try:
        if not camera.is_connected:
            camera.connect()
        camera.read(timeout_s=1.0)  # the first frame after a start can be stale: warm-up
        frames = [camera.read(timeout_s=1.0)]
        while frames[-1].t - frames[0].t < settings.camera_sample_s:
            frames.append(camera.read(timeout_s=1.0))
    except CameraStalled as exc:
        return CheckResult(label, absent, f"stalled: {exc}{tail}")
    except Exception as exc:  # CameraUnavailable and the SDKs' own errors
        return CheckResult(label, absent, f"{type(exc).__name__}: {exc}{tail}")
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


def check_camera_link(name: str, camera: Camera, settings: PreflightSettings) -> CheckResult:
    """The timestamp domain of the camera's frames and its USB link, as the
    driver reports them (RealSense: ``get_frame_timestamp_domain``,
    ``camera_info.usb_type_descriptor``). A driver that reports neither passes,
    saying so."""
    label = f"link {name}"  # within the 16 columns of a check line
    if not camera.is_connected:
        return CheckResult(label, CheckStatus.warning, "not checked: the camera did not connect")
    try:
        described = camera.describe()
        if described and described.get("timestamp_domain") is None:
            camera.read(timeout_s=1.0)  # the domain is a property of frames
            described = camera.describe()
    except Exception as exc:
        return CheckResult(label, CheckStatus.failed, f"{type(exc).__name__}: {exc}")
    if not described:
        return CheckResult(label, CheckStatus.passed, "the driver reports no link facts")
    domain, usb = described.get("timestamp_domain"), str(described.get("usb_type"))
    problems = []
    if domain == "system_time" and settings.require_device_timestamps:
        problems.append(
            "frames carry the host's arrival time (system_time), not the camera's clock: "
            "no frame metadata (librealsense's kernel patch or its RSUSB backend provides it)"
        )
    if usb.startswith("2") and settings.require_usb3:
        problems.append(
            f"USB {usb} link: two colour streams need USB 3 (a USB 3 port and cable, no USB 2 hub)"
        )
    detail = f"timestamps {domain}, USB {usb}"
    firmware, behind = firmware_note(camera)
    if firmware is not None:
        detail += f", {firmware}"
    if problems:
        return CheckResult(label, CheckStatus.failed, "; ".join(problems))
    return CheckResult(label, CheckStatus.warning if behind else CheckStatus.passed, detail)


def firmware_note(camera: Camera) -> tuple[str | None, bool]:
    """The camera's firmware against the one its SDK recommends (RealSense:
    ``camera_info.firmware_version`` and ``recommended_firmware_version``,
    read at connect), and whether it is older. None for a driver that reads
    no firmware at all; "not reported" where the device has none (a playback
    device)."""
    if not hasattr(camera, "firmware_version"):
        return None, False
    have = getattr(camera, "firmware_version", None)
    want = getattr(camera, "recommended_firmware_version", None)
    if have is None:
        return "firmware not reported", False
    if want is None:
        return f"firmware {have} (no recommended version reported)", False
    older = _version_key(have) < _version_key(want) if _comparable(have, want) else False
    if older:
        return (
            f"firmware {have} is older than the recommended {want}: update it "
            "(RealSense Viewer or rs-fw-update) before a session",
            True,
        )
    return f"firmware {have} (recommended {want})", False


def _comparable(*versions: str) -> bool:
    return all(part.isdigit() for v in versions for part in v.strip().split("."))


def _version_key(version: str) -> tuple[int, ...]:
    # "5.16.0.1": compared part by part as numbers ("5.9" is older than "5.16")
    return tuple(int(part) for part in version.strip().split("."))


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


# -- the host: realtime kernel and CPU governor -------------------------------------


def check_realtime_kernel(settings: PreflightSettings) -> CheckResult:
    """A PREEMPT_RT kernel: the RT patch set ("sysfs: Add /sys/kernel/realtime
    entry") makes ``/sys/kernel/realtime`` read 1; a stock kernel has no such
    file. libfranka under ``RealtimeConfig.Enforce`` refuses to control the
    arm without realtime scheduling (franky's installation guide)."""
    soft = CheckStatus.failed if settings.require_realtime else CheckStatus.warning
    path = Path(settings.sysfs_root) / "kernel" / "realtime"
    try:
        value = path.read_text(encoding="ascii").strip()
    except OSError:
        return CheckResult(
            "realtime kernel", soft, f"not a PREEMPT_RT kernel ({path} does not exist)"
        )
    if value != "1":
        return CheckResult("realtime kernel", soft, f"not a PREEMPT_RT kernel ({path} = {value!r})")
    return CheckResult("realtime kernel", CheckStatus.passed, f"PREEMPT_RT ({path} = 1)")


def check_cpu_governor(settings: PreflightSettings) -> CheckResult:
    """Every core at the ``performance`` governor: frequency scaling adds
    latency to libfranka's 1 kHz loop (franky's installation guide)."""
    soft = CheckStatus.failed if settings.require_realtime else CheckStatus.warning
    cpus = Path(settings.sysfs_root) / "devices" / "system" / "cpu"
    governors: dict[str, str] = {}
    for f in sorted(cpus.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        try:
            governors[f.parent.parent.name] = f.read_text(encoding="ascii").strip()
        except OSError:
            continue
    if not governors:
        # a VM or a kernel without cpufreq: nothing scales the clock
        return CheckResult(
            "cpu governor", CheckStatus.warning, f"no cpufreq governors under {cpus}"
        )
    slow = sorted(f"{cpu}={g}" for cpu, g in governors.items() if g != "performance")
    if slow:
        shown = ", ".join(slow[:4]) + (" …" if len(slow) > 4 else "")
        return CheckResult("cpu governor", soft, f"not 'performance' on {shown}")
    return CheckResult(
        "cpu governor", CheckStatus.passed, f"performance on all {len(governors)} cores"
    )


# -- commissioning and the arm's controller ----------------------------------------


def check_commissioned(cell: Cell, profile: str) -> CheckResult:
    """The cell was measured (``proctor station commission``): required on
    the real cell, where the workspace, home pose, TCP and payload come from it."""
    c = cell.commissioned
    if c is None:
        status = CheckStatus.failed if profile == "real" else CheckStatus.warning
        return CheckResult(
            "commissioning",
            status,
            "the cell is not commissioned: run `proctor station commission` and name "
            "the file as `commissioned` in the station config",
        )
    when = f" on {c.commissioned_at}" if c.commissioned_at else ""
    return CheckResult(
        "commissioning",
        CheckStatus.passed,
        f"{c.path}{when}: table at z≈{c.table.z_at(0.5, 0.0):.3f} m, "
        f"workspace {list(c.workspace_min)}..{list(c.workspace_max)}",
    )


def _report(cell: Cell, name: str) -> tuple[ControllerReport | None, CheckResult | None]:
    """The controller's report, or the result that says why there is none."""
    return ask_controller(cell.arm, name)


def check_versions(cell: Cell) -> CheckResult:
    report, failed = _report(cell, "versions")
    if report is None:
        return failed or CheckResult("versions", CheckStatus.failed, "no report")
    text = ", ".join(f"{k} {v}" for k, v in sorted(report.versions.items()))
    return CheckResult("versions", CheckStatus.passed, text or "none reported")


def _wait_for_mode(
    cell: Cell, wanted: Callable[[str], bool], timeout_s: float
) -> tuple[bool, str, float]:
    clock = cell.clock
    t0 = clock.now()
    mode = "?"
    while clock.now() - t0 < timeout_s:
        report = cell.arm.controller_report()
        mode = report.mode if report is not None else "?"
        if wanted(mode):
            return True, mode, clock.now() - t0
        clock.sleep_until(clock.now() + 0.02)
    return False, mode, clock.now() - t0


def check_enabling_device(
    cell: Cell, settings: PreflightSettings, operator: Callable[[str], None] | None
) -> CheckResult:
    """The operator presses the enabling device (the user stop wired to the
    controller) and the controller must report ``UserStopped``; released, it
    must leave it. Proves the hardware stop is connected to this robot.
    libfranka names the mode ``kUserStopped`` (``robot_state.h``); that the
    FR3's enabling / external activation device produces it, and how long the
    arm takes to leave it after release, are not verified on hardware."""
    name = "enabling device"
    if operator is None:
        return CheckResult(
            name,
            CheckStatus.warning,
            "not tested: run `proctor station check --enabling-device` with someone at the cell",
        )
    report, failed = _report(cell, name)
    if report is None:
        return failed or CheckResult(name, CheckStatus.failed, "no report")
    timeout = settings.enabling_device_timeout_s
    try:
        operator(f"press the enabling device / user stop now (within {timeout:g} s)")
        pressed, mode, t_press = _wait_for_mode(cell, lambda m: m == "UserStopped", timeout)
        if not pressed:
            return CheckResult(
                name,
                CheckStatus.failed,
                f"the controller never reported UserStopped within {timeout:g} s (last mode "
                f"{mode}): the device is not wired to this robot's user-stop input",
            )
        operator("release the enabling device / user stop now")
        released, mode, t_release = _wait_for_mode(cell, lambda m: m != "UserStopped", timeout)
    except ArmFault as exc:
        return CheckResult(name, CheckStatus.failed, str(exc))
    if not released:
        return CheckResult(
            name, CheckStatus.failed, f"still UserStopped {timeout:g} s after the release prompt"
        )
    return CheckResult(
        name,
        CheckStatus.passed,
        f"UserStopped {t_press:.1f} s after the prompt, {mode} {t_release:.1f} s after release",
    )


# -- cameras against the commissioned references -----------------------------------


def check_camera_serial(name: str, camera: Camera, cell: Cell) -> CheckResult:
    """The device that answered is the commissioned one."""
    label = f"serial {name}"
    ref = cell.commissioned.cameras.get(name) if cell.commissioned is not None else None
    # the RealSense driver reads the device's serial at connect; UVC has none
    device = getattr(camera, "device_serial", None)
    if not camera.is_connected:
        return CheckResult(label, CheckStatus.failed, "camera not connected (see its line)")
    if ref is None or ref.serial is None:
        return CheckResult(
            label, CheckStatus.warning, f"device {device or 'has no serial'}; none commissioned"
        )
    if device != ref.serial:
        return CheckResult(
            label, CheckStatus.failed, f"device is {device or 'unknown'}, commissioned {ref.serial}"
        )
    return CheckResult(label, CheckStatus.passed, f"{device}, as commissioned")


def check_framing(
    name: str, camera: Camera, cell: Cell, settings: PreflightSettings
) -> CheckResult:
    """Today's view against the commissioned reference image: a camera that
    was knocked, turned or swapped scores low."""
    label = f"framing {name}"
    path = cell.commissioned.reference_image(name) if cell.commissioned is not None else None
    if path is None:
        return CheckResult(label, CheckStatus.warning, "no commissioned reference image")
    if not camera.is_connected:
        return CheckResult(label, CheckStatus.failed, "camera not connected (see its line)")
    try:
        reference = load_image(path)
        frame = camera.read(timeout_s=1.0)
    except OSError as exc:
        return CheckResult(label, CheckStatus.failed, f"reference image {path}: {exc}")
    except Exception as exc:  # CameraStalled and the SDKs' own errors
        return CheckResult(label, CheckStatus.failed, f"{type(exc).__name__}: {exc}")
    score = image_similarity(reference, frame.image)
    detail = f"similarity {score:.2f} to {path.name} (need ≥ {settings.min_framing_similarity:g})"
    ok = score >= settings.min_framing_similarity
    return CheckResult(label, CheckStatus.passed if ok else CheckStatus.failed, detail)


def run_checks(
    cell: Cell,
    settings: PreflightSettings,
    disk_path: Path,
    profile: str,
    operator: Callable[[str], None] | None = None,
    daemon_start: bool = False,
) -> Iterator[CheckResult]:
    """Every check, in order, each as soon as it is done. ``operator`` shows
    the operator an instruction (the enabling-device test needs one; without
    it that check is skipped with a warning). ``daemon_start``: the check runs
    before the daemon (its unit's ``ExecStartPre``), so an absent camera is
    a warning, as an arm in reflex or user stop is (the daemon recovers from
    them), and nothing moves: no test motion."""
    yield check_disk(disk_path, settings)
    yield check_clock(settings, profile)
    yield check_realtime_kernel(settings)
    yield check_cpu_governor(settings)
    yield check_commissioned(cell, profile)
    yield check_arm(cell, settings)
    yield check_versions(cell)
    # what only the arm's driver knows how to check (the franky driver: libfranka's
    # robot mode, FCI and brakes, end effector, load and test motion)
    yield from cell.arm.preflight_checks(cell.clock, settings, daemon_start=daemon_start)
    yield check_enabling_device(cell, settings, operator)
    yield check_gripper(cell)
    yield check_gripper_line(cell, settings)
    absent = CheckStatus.warning if daemon_start else CheckStatus.failed
    for name, camera in cell.cameras.items():
        first = check_camera(name, camera, cell.clock, settings, absent)
        yield first
        if first.status is CheckStatus.warning:  # absent, and that is advisory here
            for label in ("serial", "framing", "link"):
                yield CheckResult(
                    f"{label} {name}", CheckStatus.warning, "not checked: the camera is absent"
                )
            continue
        yield check_camera_serial(name, camera, cell)
        yield check_framing(name, camera, cell, settings)
        yield check_camera_link(name, camera, settings)


def preflight(
    cell: Cell,
    settings: PreflightSettings,
    disk_path: Path,
    profile: str,
    emit: Callable[[CheckResult], None] = lambda r: None,
    operator: Callable[[str], None] | None = None,
    daemon_start: bool = False,
) -> list[CheckResult]:
    results = []
    for result in run_checks(cell, settings, disk_path, profile, operator, daemon_start):
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
    enabling_device: Annotated[
        bool,
        typer.Option(
            "--enabling-device",
            help="Test the enabling device / user stop: the operator presses and releases "
            "it when told (needs someone at the cell).",
        ),
    ] = False,
    daemon_start: Annotated[
        bool,
        typer.Option(
            "--daemon-start",
            help="Run before the daemon starts (its unit's ExecStartPre): an absent camera "
            "is a warning, not a failure; the daemon keeps trying it and arms no run until "
            "it delivers.",
        ),
    ] = False,
) -> None:
    """Pre-flight: host, commissioning, arm, gripper, cameras — one line each;
    exits non-zero when any check fails."""
    from proctor.core.cli_context import cli_context
    from proctor.station.config import load_station_config, spool_root
    from proctor.station.device_lock import station_devices
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
    # refused before anything is opened while the daemon holds the devices
    devices = station_devices(settings, cfg, "`proctor station check`").acquire()
    try:
        cell = build_cell(profile, cfg)
    except BaseException:
        devices.release()
        raise
    try:
        results = preflight(
            cell,
            pf,
            disk,
            profile,
            emit=lambda r: typer.echo(r.line()),
            operator=(lambda text: typer.echo(f">>> {text}")) if enabling_device else None,
            daemon_start=daemon_start,
        )
    finally:
        cell.close()
        devices.release()
    failed = [r.name for r in results if r.status == CheckStatus.failed]
    if failed:
        typer.echo(f"pre-flight FAILED: {', '.join(failed)}")
        raise typer.Exit(1)
    typer.echo("pre-flight passed")
