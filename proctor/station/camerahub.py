"""One reader thread per camera: keeps the latest frame (for observations and
the live preview) and forwards every frame to the recorder while one is set."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from proctor.station.clock import Clock, MonotonicClock
from proctor.station.drivers.camera.base import Camera, CameraStalled, Frame

log = logging.getLogger(__name__)

FrameSink = Callable[[str, Frame], None]


class CameraHub:
    def __init__(self, cameras: dict[str, Camera], clock: Clock, virtual: bool) -> None:
        self.cameras = cameras
        self.clock = clock
        self.virtual = virtual
        self.wall = MonotonicClock()
        self._latest: dict[str, Frame] = {}
        self._latest_wall: dict[str, float] = {}
        self._cond = threading.Condition()
        self._sink: FrameSink | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: dict[str, str] = {}
        self.stalls: dict[str, int] = {name: 0 for name in cameras}

    def start(self) -> None:
        for name, camera in self.cameras.items():
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

    def _read_loop(self, name: str, camera: Camera) -> None:
        while not self._stop.is_set():
            try:
                frame = camera.read(timeout_s=0.5)
            except CameraStalled:
                if not self.virtual:
                    self.stalls[name] += 1
                continue
            except Exception as exc:
                self.errors[name] = f"{type(exc).__name__}: {exc}"
                log.error("camera %s failed", name, exc_info=True)
                if self._stop.wait(0.5):
                    return
                continue
            with self._cond:
                self._latest[name] = frame
                self._latest_wall[name] = self.wall.now()
                sink = self._sink
                self._cond.notify_all()
            if sink is not None:
                sink(name, frame)

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
