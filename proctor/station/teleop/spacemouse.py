"""3Dconnexion SpaceMouse: HID report parsing and the teleop source.

Reports (USB HID, what hidapi's ``read`` returns, report id first):

* id 1 — translation: x, y, z as little-endian int16 (bytes 1–6). Newer
  devices (SpaceMouse Compact/Wireless since ~2019) put the rotation in the
  same report: rx, ry, rz in bytes 7–12 (13 bytes in all).
* id 2 — rotation: rx, ry, rz (bytes 1–6), older devices.
* id 3 — buttons: a bitmask (bit 0 = left/button 1, bit 1 = right/button 2).

Axis values span about ±350 at full deflection. The device's axes are not
the robot's: ``SpaceMouseConfig.axis_map`` says which device axis (and sign)
drives each robot axis. NOTE: no SpaceMouse was available when this was
written; the report layout follows the published descriptors, and the
default axis map (an operator facing the robot) must be checked on a device.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from proctor.core.clock import Clock, MonotonicClock
from proctor.station.teleop.source import TeleopCommand, TeleopLimits

log = logging.getLogger(__name__)

REPORT_TRANSLATION = 1
REPORT_ROTATION = 2
REPORT_BUTTONS = 3
AXES = ("x", "y", "z", "rx", "ry", "rz")  # device axes, in report order
BUTTON_LEFT = 1 << 0
BUTTON_RIGHT = 1 << 1


class ReportError(ValueError):
    """A HID report that is not a SpaceMouse report."""


@dataclass(frozen=True)
class SpaceMouseState:
    axes: tuple[int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0)  # raw device counts
    buttons: int = 0


def _axes3(report: bytes, offset: int) -> tuple[int, int, int]:
    return struct.unpack_from("<hhh", report, offset)  # type: ignore[return-value]


def parse_report(report: bytes | list[int], state: SpaceMouseState) -> SpaceMouseState:
    """The device state after ``report`` (raw bytes, report id first)."""
    data = bytes(report)
    if not data:
        raise ReportError("empty HID report")
    rid = data[0]
    if rid == REPORT_TRANSLATION:
        if len(data) < 7:
            raise ReportError(f"translation report has {len(data)} bytes, needs 7")
        t = _axes3(data, 1)
        r = _axes3(data, 7) if len(data) >= 13 else state.axes[3:]
        return replace(state, axes=(*t, *r))
    if rid == REPORT_ROTATION:
        if len(data) < 7:
            raise ReportError(f"rotation report has {len(data)} bytes, needs 7")
        return replace(state, axes=(*state.axes[:3], *_axes3(data, 1)))
    if rid == REPORT_BUTTONS:
        if len(data) < 2:
            raise ReportError("button report has no payload")
        return replace(state, buttons=int.from_bytes(data[1:], "little"))
    raise ReportError(f"unknown report id {rid}")


@dataclass(frozen=True)
class SpaceMouseConfig:
    # counts at full deflection (3Dconnexion devices report about ±350)
    full_scale: float = 350.0
    # below this fraction of full scale the cap is at rest: the sensor never
    # reads exactly zero when let go
    deadband: float = 0.08
    # robot axis i (vx, vy, vz, wx, wy, wz) ← sign × device axis; default for
    # an operator facing the robot across the table: pushing the cap away
    # moves the tool away (+x), pushing down moves it down
    axis_map: tuple[tuple[str, float], ...] = (
        ("y", -1.0),
        ("x", -1.0),
        ("z", -1.0),
        ("ry", -1.0),
        ("rx", -1.0),
        ("rz", -1.0),
    )
    limits: TeleopLimits = field(default_factory=TeleopLimits)
    # a deflected cap keeps reporting (~60 reports/s); a state older than this
    # means the device went away mid-motion, and the command falls to zero
    stale_s: float = 0.25

    def __post_init__(self) -> None:
        if len(self.axis_map) != 6:
            raise ValueError("spacemouse axis_map needs 6 entries (vx, vy, vz, wx, wy, wz)")
        for axis, sign in self.axis_map:
            if axis not in AXES or abs(sign) != 1.0:
                raise ValueError(f"spacemouse axis_map: ({axis!r}, {sign}) is not (axis, ±1)")


def twist_from_state(state: SpaceMouseState, config: SpaceMouseConfig) -> np.ndarray:
    """Robot-frame twist for a device state: deadband, rescale, map, limit."""
    raw = np.asarray(state.axes, dtype=np.float64) / config.full_scale
    raw = np.clip(raw, -1.0, 1.0)
    # deadband, then rescale so that the command starts from zero at its edge
    mag = np.abs(raw)
    shaped = np.where(
        mag > config.deadband, np.sign(raw) * (mag - config.deadband) / (1 - config.deadband), 0.0
    )
    index = {a: i for i, a in enumerate(AXES)}
    mapped = np.array([sign * shaped[index[axis]] for axis, sign in config.axis_map])
    mapped[:3] *= config.limits.max_linear_m_s
    mapped[3:] *= config.limits.max_angular_rad_s
    return mapped


ReportReader = Callable[[int], bytes]  # timeout_ms → report bytes (b"" on timeout)


class SpaceMouseSource:
    """Reads reports on a thread; ``command`` gives the current twist and a
    gripper target set by the buttons (left closes, right opens)."""

    def __init__(
        self,
        read_report: ReportReader,
        config: SpaceMouseConfig | None = None,
        clock: Clock | None = None,
        close: Callable[[], None] | None = None,
    ) -> None:
        self._read = read_report
        self._close = close
        self.config = config or SpaceMouseConfig()
        self.clock = clock or MonotonicClock()
        self._lock = threading.Lock()
        self._state = SpaceMouseState()
        self._state_t: float | None = None
        self._gripper = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.bad_reports = 0
        self.error: str | None = None

    def feed(self, report: bytes) -> None:
        """Apply one report (the reader thread calls this; tests may too)."""
        try:
            with self._lock:
                before = self._state.buttons
                self._state = parse_report(report, self._state)
                self._state_t = self.clock.now()
                pressed = self._state.buttons & ~before
                if pressed & BUTTON_LEFT:
                    self._gripper = 1.0
                elif pressed & BUTTON_RIGHT:
                    self._gripper = 0.0
        except ReportError:
            self.bad_reports += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                report = self._read(50)
            except OSError as exc:
                self.error = f"SpaceMouse read failed: {exc}"
                log.error("%s", self.error)
                return
            if report:
                self.feed(report)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="spacemouse", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None
        if self._close is not None:
            self._close()

    def command(self) -> TeleopCommand:
        now = self.clock.now()
        with self._lock:
            state, t, gripper = self._state, self._state_t, self._gripper
        if t is None or (now - t > self.config.stale_s and any(state.axes)):
            return TeleopCommand.still(now, gripper)
        return TeleopCommand(t=now, twist=twist_from_state(state, self.config), gripper=gripper)
