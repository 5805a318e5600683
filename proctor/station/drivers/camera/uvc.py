"""UVC cameras (webcams, wrist cameras without an SDK) through OpenCV's V4L2
backend.

``VideoCapture.read`` blocks — for up to V4L2's own select timeout (10 s)
when a camera stops streaming — so a grabber thread owns the capture and
hands the newest frame over; ``read`` waits on that hand-over and raises
``CameraStalled`` when nothing new arrives in time, however the device
misbehaves.

``device`` may also name a video file: OpenCV's FFmpeg backend then plays it
(paced at the configured rate) through the same grabber — how the tests and
the twin exercise this driver without a camera. A file that ends is a camera
that stops delivering.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np

from proctor.core.clock import Clock, MonotonicClock
from proctor.station.drivers.camera.base import CAMERAS, Camera, CameraConfig, CameraStalled, Frame
from proctor.station.drivers.camera.common import CameraUnavailable, DeviceClockMapper

log = logging.getLogger(__name__)

DEVICE_PREFIX = "/dev/"


@dataclass(frozen=True)
class UvcCameraConfig(CameraConfig):
    driver: ClassVar[str] = "uvc"
    # a /dev/v4l/by-id/… path on the station (it survives replugging, unlike
    # /dev/videoN), a bare index ("0"), or a video file (playback)
    device: str = "/dev/video0"
    # MJPG: two 640×480@30 YUYV streams (2 × 18 MB/s) saturate a USB 2 bus;
    # compressed frames leave room for both
    fourcc: str = "MJPG"
    # one buffered frame: the newest image, not one from 100 ms ago
    buffer_frames: int = 1
    # a device that failed a read is retried this often (s) until it answers
    # again or the camera is disconnected; the stall shows in read() meanwhile
    retry_s: float = 0.2
    clock_window_s: float = 2.0  # see DeviceClockMapper


@CAMERAS.register("uvc")
class UvcCamera(Camera[UvcCameraConfig]):
    config_class: ClassVar[type[UvcCameraConfig]] = UvcCameraConfig

    def __init__(self, config: UvcCameraConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or MonotonicClock()
        self._cap: Any = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._latest: Frame | None = None
        self._delivered = -1  # index of the last frame read() returned
        self._count = 0
        self._mapper = DeviceClockMapper(config.clock_window_s)
        self.error: str | None = None
        self.frame_size: tuple[int, int] | None = None

    @property
    def is_file(self) -> bool:
        d = self.config.device
        return not d.startswith(DEVICE_PREFIX) and not d.isdigit()

    def _open(self) -> Any:
        c = self.config
        if self.is_file:
            if not Path(c.device).is_file():
                raise CameraUnavailable(f"camera {c.name}: video file {c.device} does not exist")
            cap = cv2.VideoCapture(c.device, cv2.CAP_FFMPEG)
        else:
            source: int | str = int(c.device) if c.device.isdigit() else c.device
            if isinstance(source, str) and not Path(source).exists():
                raise CameraUnavailable(
                    f"camera {c.name}: UVC device {source} does not exist "
                    "(unplugged? check /dev/v4l/by-id/)"
                )
            cap = cv2.VideoCapture(source, cv2.CAP_V4L2)
            if cap.isOpened():
                cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter.fourcc(*c.fourcc))
                cap.set(cv2.CAP_PROP_FRAME_WIDTH, c.width)
                cap.set(cv2.CAP_PROP_FRAME_HEIGHT, c.height)
                cap.set(cv2.CAP_PROP_FPS, c.fps)
                cap.set(cv2.CAP_PROP_BUFFERSIZE, c.buffer_frames)
        if not cap.isOpened():
            cap.release()
            raise CameraUnavailable(
                f"camera {c.name}: OpenCV could not open {c.device} "
                f"({'FFmpeg' if self.is_file else 'V4L2'}: busy, no permission, or not a camera)"
            )
        return cap

    def connect(self) -> None:
        if self._cap is not None:
            return
        c = self.config
        cap = self._open()
        ok, bgr = cap.read()
        if not ok or bgr is None:
            cap.release()
            raise CameraUnavailable(f"camera {c.name}: {c.device} opened but delivered no frame")
        h, w = bgr.shape[:2]
        if (w, h) != (c.width, c.height):
            cap.release()
            raise CameraUnavailable(
                f"camera {c.name}: {c.device} delivers {w}x{h}, configured {c.width}x{c.height}"
            )
        self.frame_size = (w, h)
        self._cap = cap
        self._stop.clear()
        self._count = 0
        self._delivered = -1
        self._latest = None
        self._mapper = DeviceClockMapper(c.clock_window_s)
        self._publish(bgr)
        self._thread = threading.Thread(target=self._grab_loop, name=f"uvc-{c.name}", daemon=True)
        self._thread.start()

    def disconnect(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            if self._thread.is_alive():
                log.error("camera %s: grabber still blocked in the driver", self.config.name)
            self._thread = None
        if self._cap is not None:
            self._cap.release()
            self._cap = None

    @property
    def is_connected(self) -> bool:
        return self._cap is not None

    def _publish(self, bgr: np.ndarray) -> None:
        arrival = self.clock.now()
        pos_ms = float(self._cap.get(cv2.CAP_PROP_POS_MSEC)) if self._cap is not None else 0.0
        # V4L2 reports the driver's buffer timestamp, a file its stream time
        # (0 for its first frame); a device that reports nothing gives 0
        device_t = pos_ms / 1000.0 if pos_ms > 0 or (self.is_file and pos_ms == 0) else None
        t = self._mapper.map(device_t, arrival) if device_t is not None else arrival
        frame = Frame(
            t=t,
            index=self._count,
            image=cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB),
            device_t=device_t,
        )
        with self._cond:
            self._count += 1
            self._latest = frame
            self._cond.notify_all()

    def _grab_loop(self) -> None:
        cap = self._cap
        period = 1.0 / self.config.fps
        next_t = self.clock.now() + period
        while not self._stop.is_set():
            if self.is_file:
                # a file plays as fast as it decodes: pace it like a camera
                self.clock.sleep_until(next_t)
                next_t += period
            ok, bgr = cap.read()
            if self._stop.is_set():
                return
            if not ok or bgr is None:
                self.error = "end of file" if self.is_file else "read failed"
                if self._stop.wait(self.config.retry_s):
                    return
                continue
            self.error = None
            self._publish(bgr)

    def read(self, timeout_s: float = 1.0) -> Frame:
        if self._cap is None:
            raise CameraUnavailable(f"camera {self.config.name} is not connected")
        with self._cond:
            fresh = self._cond.wait_for(
                lambda: self._latest is not None and self._latest.index > self._delivered,
                timeout=timeout_s,
            )
            if not fresh or self._latest is None:
                why = f" ({self.error})" if self.error else ""
                raise CameraStalled(
                    f"camera {self.config.name} ({self.config.device}): "
                    f"no frame for {timeout_s:.2f} s{why}"
                )
            self._delivered = self._latest.index
            return self._latest
