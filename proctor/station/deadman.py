"""The console-link deadman: an episode started from the operator console
stops when the console stops answering.

The console page sends a heartbeat every half second while it is open
(``POST /api/heartbeat`` through the web app). An episode started through
the station API is watched: once no heartbeat has arrived for
``console_deadman_s`` (station config, default 2 s) while it runs, the
deadman calls ``on_lost`` — the daemon ends the episode as an operator stop
naming the lost console. The start itself counts as a heartbeat. This is a
software watchdog on a software stop path: the robot's hardware emergency
stop and enabling device remain the safety function.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from proctor.core.clock import Clock, MonotonicClock

log = logging.getLogger(__name__)


class ConsoleDeadman:
    def __init__(
        self,
        period_s: float,
        on_lost: Callable[[float], None],
        *,
        clock: Clock | None = None,
        poll_s: float = 0.05,
    ) -> None:
        if period_s <= 0:
            raise ValueError("the console deadman needs a positive period")
        self.period_s = period_s
        self._on_lost = on_lost
        self._clock = clock or MonotonicClock()
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._last = self._clock.now()
        self._watching = False
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """A heartbeat from the console."""
        with self._lock:
            self._last = self._clock.now()

    def watch(self) -> None:
        """Watch the episode now starting (its start counts as a heartbeat)."""
        with self._lock:
            self._last = self._clock.now()
            self._watching = True

    def release(self) -> None:
        """The watched episode is over (or never started)."""
        with self._lock:
            self._watching = False

    @property
    def watching(self) -> bool:
        return self._watching

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="console-deadman", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._closed.wait(self._poll_s):
            with self._lock:
                silent = self._clock.now() - self._last
                lost = self._watching and silent > self.period_s
                if lost:
                    self._watching = False  # once per episode
            if lost:
                log.warning("console link lost: no heartbeat for %.1f s", silent)
                try:
                    self._on_lost(silent)
                except Exception:
                    log.critical("the console deadman failed to stop the episode", exc_info=True)
