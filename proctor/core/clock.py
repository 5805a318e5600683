"""Clocks. Time is an observation: every component is handed a clock and
every sample carries the clock time it was taken at. Nothing in ``proctor/station/``
reads wall time at the point of use.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic timeline (arbitrary origin)."""
        ...

    def sleep_until(self, t: float) -> None:
        """Return once ``now() >= t``."""
        ...


class MonotonicClock:
    """The real station's clock: ``time.monotonic``."""

    def now(self) -> float:
        return time.monotonic()

    def sleep_until(self, t: float) -> None:
        delay = t - time.monotonic()
        if delay > 0:
            time.sleep(delay)


class VirtualClock:
    """A clock that only moves when told to, so a simulated campaign runs
    faster than real time and every test is deterministic.

    ``sleep_until`` advances the clock (the sleeper is the one driving time);
    ``wait_until`` blocks a *different* thread until the driver gets there.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)
        self._cond = threading.Condition()

    def now(self) -> float:
        with self._cond:
            return self._t

    def advance(self, dt: float) -> float:
        if dt < 0:
            raise ValueError("a clock cannot go backwards")
        with self._cond:
            self._t += dt
            self._cond.notify_all()
            return self._t

    def sleep_until(self, t: float) -> None:
        with self._cond:
            if t > self._t:
                self._t = t
                self._cond.notify_all()

    def wait_until(self, t: float, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._t >= t, timeout=timeout)
