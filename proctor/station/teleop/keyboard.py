"""Keyboard teleop, for a station without a SpaceMouse: the terminal that
serves the teleop policy reads single key presses.

A terminal reports key presses, never releases; holding a key repeats it
after the repeat delay. The Linux console's defaults are
250 ms and 10.9 repeats a second (kbdrate(8)); desktop sessions
usually repeat faster (about 25–33 a second, after 0.5–0.66 s: their usual
defaults, not checked against each desktop's source). So each press drives
its axis for ``hold_s``, longer than the 92 ms between the console's repeats,
and a held key keeps it driven; letting go stops the axis within ``hold_s``
(a repeat rate set below about 7 a second makes a held key stutter). A tap
at full speed (0.15 m/s) therefore moves the tool about 2 cm, not the 7.5 cm
a half-second hold gave (plus, for either, the up to 200 ms of the reply
chunk the station is executing: ``policy.CHUNK_STEPS``). A held key moves,
pauses for the rest of the repeat delay, then moves steadily: bridging the
delay would mean every tap overshoots by it. For long continuous moves use
the SpaceMouse. Lower case moves at half speed, upper case at full.

    w / s   tool away / toward the robot base (±x)     j / l  roll  (±wx)
    a / d   tool left / right (±y)                     i / k  pitch (±wy)
    r / f   tool up / down (±z)                        q / e  yaw   (±wz)
    space   toggle the gripper    c close    o open    x  stop everything
"""

from __future__ import annotations

import logging
import os
import select
import sys
import threading
from dataclasses import dataclass, field
from typing import IO

import numpy as np

from proctor.core.clock import Clock, MonotonicClock
from proctor.station.teleop.source import TeleopCommand, TeleopLimits

log = logging.getLogger(__name__)

# key → (twist axis 0..5, direction)
KEY_AXES: dict[str, tuple[int, float]] = {
    "w": (0, +1.0),
    "s": (0, -1.0),
    "a": (1, +1.0),
    "d": (1, -1.0),
    "r": (2, +1.0),
    "f": (2, -1.0),
    "j": (3, +1.0),
    "l": (3, -1.0),
    "i": (4, +1.0),
    "k": (4, -1.0),
    "q": (5, +1.0),
    "e": (5, -1.0),
}
KEY_TOGGLE_GRIPPER = " "
KEY_CLOSE = "c"
KEY_OPEN = "o"
KEY_STOP = "x"
SLOW_FRACTION = 0.5  # lower-case keys move at half the limit


@dataclass(frozen=True)
class KeyboardConfig:
    limits: TeleopLimits = field(default_factory=TeleopLimits)
    # longer than the interval between key repeats at the Linux console's default
    # (92 ms at 10.9/s), so a repeating key drives its axis without gaps; short,
    # so a tap or a release stops the tool within 0.15 s (≈ 2 cm at 0.15 m/s)
    hold_s: float = 0.15


class KeyboardMapping:
    """Key presses → the operator's twist and gripper target (pure: no I/O)."""

    def __init__(self, config: KeyboardConfig | None = None, clock: Clock | None = None) -> None:
        self.config = config or KeyboardConfig()
        self.clock = clock or MonotonicClock()
        self._lock = threading.Lock()
        self._axes: dict[int, tuple[float, float]] = {}  # axis → (value, pressed at)
        self._gripper = 0.0

    def press(self, key: str) -> bool:
        """Apply one key; False for a key that means nothing."""
        now = self.clock.now()
        with self._lock:
            if key == KEY_STOP:
                self._axes.clear()
                return True
            if key == KEY_TOGGLE_GRIPPER:
                self._gripper = 0.0 if self._gripper >= 0.5 else 1.0
                return True
            if key == KEY_CLOSE:
                self._gripper = 1.0
                return True
            if key == KEY_OPEN:
                self._gripper = 0.0
                return True
            spec = KEY_AXES.get(key.lower())
            if spec is None:
                return False
            axis, direction = spec
            fraction = 1.0 if key.isupper() else SLOW_FRACTION
            self._axes[axis] = (direction * fraction, now)
            return True

    def command(self) -> TeleopCommand:
        now = self.clock.now()
        limits = self.config.limits
        twist = np.zeros(6)
        with self._lock:
            for axis, (value, t) in list(self._axes.items()):
                if now - t > self.config.hold_s:
                    del self._axes[axis]
                    continue
                scale = limits.max_linear_m_s if axis < 3 else limits.max_angular_rad_s
                twist[axis] = value * scale
            gripper = self._gripper
        return TeleopCommand(t=now, twist=twist, gripper=gripper)


class KeyboardSource:
    """Reads the terminal's key presses (cbreak mode, no echo) on a thread."""

    def __init__(
        self,
        config: KeyboardConfig | None = None,
        clock: Clock | None = None,
        stream: IO[str] | None = None,
    ) -> None:
        self.mapping = KeyboardMapping(config, clock)
        self.stream = stream or sys.stdin
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved: list | None = None

    def start(self) -> None:
        if not self.stream.isatty():
            raise RuntimeError("keyboard teleop needs an interactive terminal on stdin")
        import termios
        import tty

        fd = self.stream.fileno()
        self._saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="keyboard", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        fd = self.stream.fileno()
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                key = os.read(fd, 1).decode(errors="ignore")
                if key:
                    self.mapping.press(key)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None
        if self._saved is not None:
            import termios

            termios.tcsetattr(self.stream.fileno(), termios.TCSADRAIN, self._saved)
            self._saved = None

    def command(self) -> TeleopCommand:
        return self.mapping.command()
