"""The franky arm as the driver tests build it: a config against franky-sim,
a settle wait, and a robot wrapper that injects faults."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import franky
import numpy as np

from proctor.station.drivers.arm.franky import (
    FrankyArm,
    FrankyArmConfig,
)
from tests.station.drivers.conftest import wait_for

# how long to wait for the arm to start, finish or come to rest. Only a
# deadline, never the verdict (what each test asserts is where the arm went):
# generous, because a starved franky-sim (two cores shared with the rest of
# the suite) runs far slower than real time.
DEADLINE_S = 60.0


def config(host: str, **overrides: Any) -> FrankyArmConfig:
    values: dict[str, Any] = {
        "host": host,
        "realtime": "ignore",  # no realtime kernel here
        # faster than a real station would run: franky-sim has nobody to hurt
        "relative_dynamics_factor": 0.5,
        "home_dynamics_factor": 0.5,
        # the driver's own wall-clock deadlines, sized for a real arm (the joints
        # converge within 1 s of a trajectory's end, a stop lands within 1 s):
        # a starved franky-sim takes longer, and no test here is about them
        "home_timeout_s": 120.0,
        "settle_timeout_s": DEADLINE_S,
        "stop_timeout_s": DEADLINE_S,
    }
    values.update(overrides)
    return FrankyArmConfig(**values)


def settle(arm: FrankyArm, timeout_s: float = DEADLINE_S) -> np.ndarray:
    """Wait until the arm is at rest; return where it stopped. Rest is judged
    on positions (< 0.5 mrad of change over 0.1 s): franky-sim's joint 7
    velocity estimate chatters at ±0.08 rad/s while the joint stands still."""
    window: list[tuple[float, np.ndarray]] = []

    def still() -> bool:
        s = arm.read_state()
        window.append((s.t, s.q))
        while window[0][0] < s.t - 0.1:
            window.pop(0)
        if s.t - window[0][0] < 0.09:
            return False
        spread = np.ptp(np.array([q for _, q in window]), axis=0)
        return float(np.max(spread)) < 5e-4

    wait_for(lambda: not arm.moving, timeout_s, "the motion to finish")
    wait_for(still, timeout_s, "the arm to come to rest")
    return arm.read_state().q


class FaultInjectingRobot:
    """TEST-ONLY wrapper around a real ``franky.Robot`` connected to
    franky-sim. Everything passes through, except that a test can arm one
    libfranka exception (with libfranka's text) to be raised by the next call
    of a chosen method, as the real controller would after a reflex or a lost
    link. It also counts ``stop`` and ``recover_from_errors`` calls."""

    def __init__(self, robot: franky.Robot) -> None:
        self._robot = robot
        # factories, not exception instances: a stored, raised exception holds
        # its traceback, whose frames hold this wrapper — a reference cycle
        # that would keep the robot connection open until the next gc pass
        self._armed: dict[str, Callable[[], BaseException]] = {}
        self._sticky: dict[str, Callable[[], BaseException]] = {}
        self.calls: dict[str, int] = {}
        self._before: dict[str, Callable[[], None]] = {}
        self._lock = threading.Lock()

    def before(self, method: str, action: Callable[[], None]) -> None:
        """Run ``action`` at each call of ``method``, before it goes through."""
        with self._lock:
            self._before[method] = action

    def inject(self, method: str, exc: Callable[[], BaseException], sticky: bool = False) -> None:
        with self._lock:
            (self._sticky if sticky else self._armed)[method] = exc

    def clear(self) -> None:
        with self._lock:
            self._armed.clear()
            self._sticky.clear()
            self._before.clear()

    def release(self) -> None:
        """Drop the franky connection (the controller serves one client), even
        while something — a failed test's traceback — still holds this wrapper."""
        self._robot = None

    def _maybe_raise(self, method: str) -> None:
        with self._lock:
            self.calls[method] = self.calls.get(method, 0) + 1
            make = self._armed.pop(method, None) or self._sticky.get(method)
            action = self._before.get(method)
        if action is not None:
            action()
        if make is not None:
            raise make()

    def poll_motion(self) -> bool:
        self._maybe_raise("poll_motion")
        return self._robot.poll_motion()

    def join_motion(self, timeout: float | None = None) -> bool:
        self._maybe_raise("join_motion")
        return self._robot.join_motion(timeout=timeout)

    def move(self, motion: Any, asynchronous: bool = False) -> None:
        self._maybe_raise("move")
        self._robot.move(motion, asynchronous=asynchronous)

    def stop(self) -> None:
        self._maybe_raise("stop")
        self._robot.stop()

    def recover_from_errors(self) -> bool:
        self._maybe_raise("recover_from_errors")
        return self._robot.recover_from_errors()

    @property
    def state(self) -> Any:
        self._maybe_raise("state")
        return self._robot.state

    @property
    def has_errors(self) -> bool:
        return self._robot.has_errors

    @property
    def model(self) -> Any:
        return self._robot.model

    @property
    def is_in_control(self) -> bool:
        return self._robot.is_in_control

    def __getattr__(self, name: str) -> Any:
        # the rest (the limits homing's speed cap reads: translation_velocity_limit,
        # joint_velocity_limit…) passes through untouched
        return getattr(self._robot, name)
