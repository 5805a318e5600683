"""One reader thread per camera: keeps the latest frame (for observations and
the live preview) and forwards every frame to the recorder while one is set.

A camera that fails (the SDK raises) or, on a real-time clock, delivers
nothing for ``reconnect_after_s`` is disconnected and connected again, with a
backoff between attempts (``backoff_s`` doubling up to ``max_backoff_s``): a
replugged USB cable comes back without a restart. Each camera's health
(``health``) goes into the daemon's status, and ``arming_problem`` names a
camera that is not delivering frames, so the runner refuses to arm instead of
starting one episode after another that ends ``system`` on a silent camera.

A camera that is not connected when the hub starts (absent when the daemon
started: ``Cell.connect(cameras_required=False)``) is tried the same way, from
the first backoff on; until it has delivered it is ``absent``, not
``reconnecting``, and arming is refused naming it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from proctor.core.clock import Clock, MonotonicClock
from proctor.station.drivers.camera.base import Camera, CameraStalled, Frame

log = logging.getLogger(__name__)

FrameSink = Callable[[str, Frame], None]

# a camera this long without a frame (wall seconds) is not fit to record: the
# control loop ends an episode on a camera silent for 1 s (CAMERA_STALL_S)
STALE_S = 1.0


class CameraHub:
    def __init__(
        self,
        cameras: dict[str, Camera],
        clock: Clock,
        virtual: bool,
        *,
        reconnect_after_s: float = 2.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
    ) -> None:
        self.cameras = cameras
        self.clock = clock
        self.virtual = virtual
        self.reconnect_after_s = reconnect_after_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.wall = MonotonicClock()
        self._latest: dict[str, Frame] = {}
        self._latest_wall: dict[str, float] = {}
        self._cond = threading.Condition()
        self._sink: FrameSink | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: dict[str, str] = {}
        self.stalls: dict[str, int] = {name: 0 for name in cameras}
        self.reconnects: dict[str, int] = {name: 0 for name in cameras}
        # since when (wall) each camera has been connected and reading; None: it is not
        self._up_since: dict[str, float | None] = {name: None for name in cameras}
        # cameras connected at least once since the hub started: one that never
        # was is ``absent`` (it was not there at start), not ``reconnecting``
        self._seen: set[str] = set()

    def start(self, absent: dict[str, str] | None = None) -> None:
        """Start reading; ``absent`` names the cameras that did not connect
        (and why), for the status until the first attempt here says more."""
        self._stop.clear()
        for name, why in (absent or {}).items():
            self.errors[name] = why
        for name, camera in self.cameras.items():
            self._up_since[name] = self.wall.now() if camera.is_connected else None
            if camera.is_connected:
                self._seen.add(name)
            t = threading.Thread(
                target=self._read_loop, args=(name, camera), name=f"camera-{name}", daemon=True
            )
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)
        self._threads = []

    def set_sink(self, sink: FrameSink | None) -> None:
        with self._cond:
            self._sink = sink

    def _silent_for(self, name: str) -> float:
        """Wall seconds without a frame since the camera was last (re)connected."""
        up = self._up_since[name]
        if up is None:
            return float("inf")
        with self._cond:
            last = self._latest_wall.get(name)
        return self.wall.now() - (up if last is None or last < up else last)

    def _drop(self, name: str, camera: Camera, why: str) -> None:
        """Give the camera up until the next (re)connect attempt."""
        self.errors[name] = why
        self._up_since[name] = None
        log.warning("camera %s: %s; reconnecting", name, why)
        try:
            camera.disconnect()
        except Exception:
            log.warning("camera %s: disconnect failed", name, exc_info=True)

    def _reconnect(self, name: str, camera: Camera, backoff: float) -> float:
        """One attempt, after ``backoff`` s; returns the next backoff."""
        if self._stop.wait(backoff):
            return backoff
        try:
            camera.connect()
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            self.errors[name] = f"reconnecting: {why}" if name in self._seen else why
            return min(2 * backoff, self.max_backoff_s)
        self.reconnects[name] += 1
        self._up_since[name] = self.wall.now()
        log.info("camera %s %s", name, "reconnected" if name in self._seen else "connected")
        self._seen.add(name)
        return self.backoff_s

    def _read_loop(self, name: str, camera: Camera) -> None:
        backoff = self.backoff_s
        while not self._stop.is_set():
            if self._up_since[name] is None:
                backoff = self._reconnect(name, camera, backoff)
                continue
            try:
                frame = camera.read(timeout_s=0.5)
            except CameraStalled:
                if self.virtual:
                    continue  # time stands still between episodes: no frame is due
                self.stalls[name] += 1
                silent = self._silent_for(name)
                if silent > self.reconnect_after_s:
                    self._drop(name, camera, f"no frame for {silent:.1f} s")
                continue
            except Exception as exc:
                log.error("camera %s failed", name, exc_info=True)
                self._drop(name, camera, f"{type(exc).__name__}: {exc}")
                continue
            self.errors.pop(name, None)
            with self._cond:
                self._latest[name] = frame
                self._latest_wall[name] = self.wall.now()
                sink = self._sink
                self._cond.notify_all()
            if sink is not None:
                sink(name, frame)

    # -- health ----------------------------------------------------------------
    def health(self, name: str) -> dict[str, Any]:
        """What the console shows for camera ``name``: ``ok``, ``stalled`` (no
        frame for over a second), ``reconnecting`` or ``absent`` (not connected
        since the hub started), with the last error."""
        up = self._up_since[name] is not None
        age = self.wall_age(name)
        if not self._threads:
            state = "not started"  # nobody reads it: nothing to judge
        elif not up:
            state = "reconnecting" if name in self._seen else "absent"
        elif not self.virtual and self._silent_for(name) > STALE_S:
            state = "stalled"
        else:
            state = "ok"
        return {
            "state": state,
            "error": self.errors.get(name),
            "reconnects": self.reconnects[name],
            "stalls": self.stalls[name],
            "last_frame_age_s": None if age == float("inf") else round(age, 3),
        }

    def arming_problem(self) -> str | None:
        """Why no episode may start now (a camera not delivering), or None."""
        for name in self.cameras:
            h = self.health(name)
            if h["state"] not in ("ok", "not started"):
                why = f" ({h['error']})" if h["error"] else ""
                return (
                    f"camera {name} is {h['state']}{why}: check its cable; "
                    "the station reconnects it by itself"
                )
        return None

    def latest(self, name: str) -> Frame | None:
        with self._cond:
            return self._latest.get(name)

    def wall_age(self, name: str) -> float:
        """Wall seconds since the camera last delivered a frame (inf if never)."""
        with self._cond:
            t = self._latest_wall.get(name)
        return float("inf") if t is None else self.wall.now() - t

    def frame_for(self, name: str, t: float, period: float, timeout_s: float) -> Frame:
        """The newest frame taken at or before station time ``t``.

        On a virtual clock the reader may still be rendering it, so wait (wall
        time) for the frame of the period that ends at ``t``; on a real clock
        take the newest there is."""
        deadline = self.wall.now() + timeout_s
        # a simulated camera says how many frames it has produced so far
        produced = getattr(self.cameras[name], "frames_produced", None)
        with self._cond:
            while True:
                frame = self._latest.get(name)
                if frame is not None:
                    if not self.virtual:
                        return frame
                    if produced is not None:
                        if frame.index >= produced() - 1:
                            return frame
                    elif frame.t > t - period - 1e-9:
                        return frame
                remaining = deadline - self.wall.now()
                if remaining <= 0:
                    raise CameraStalled(f"camera {name}: no frame for station time {t:.3f}")
                self._cond.wait(remaining)
