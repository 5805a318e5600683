"""What the camera drivers share: mapping a device's timestamps onto the
station clock, and the error for a camera that cannot be opened."""

from __future__ import annotations

from collections import deque


class CameraUnavailable(ConnectionError):
    """The camera could not be opened (absent, busy, wrong mode); the message
    names the device and carries the library's own words."""


# a frame's transfer latency (exposure end → the driver has it) stays far below
# this: tens of ms over USB with one buffered frame, a few frame periods at
# worst on a busy host. More than it, and the frame is on another timeline.
MAX_LATENCY_S = 0.5


class DeviceClockMapper:
    """Maps a camera's own timestamps onto the station clock.

    Each frame gives a pair (device time ``d``, station time ``a`` at which
    the driver received it). Reception always follows capture by the
    transfer latency, so ``a − d = offset + latency`` with latency ≥ 0: the
    smallest ``a − d`` over a recent window is the best estimate of the
    offset (the least-delayed frame), and a capture time ``d + offset`` is
    never later than its arrival. The window is short (``window_s``) so that
    drift between the two oscillators (tens of ppm) never accumulates, and a
    device clock that jumps backwards (a camera reset, a looping playback)
    starts the estimate afresh. Mapped times are strictly increasing.

    A jump back that happened while nobody read the camera need not show as
    one: a looping playback left unread for longer than its loop comes back
    round to a device time past the last one seen. Its frames are then off
    the window's timeline by the jump, and their ``a − d`` exceeds the
    window's best by more than any transfer latency; such a frame starts the
    estimate afresh too (``max_latency_s``; a loop shorter than that goes
    unnoticed). A frame merely late (a busy host) by less keeps the estimate.
    """

    def __init__(self, window_s: float = 2.0, max_latency_s: float = MAX_LATENCY_S) -> None:
        self.window_s = window_s
        self.max_latency_s = max_latency_s
        self._samples: deque[tuple[float, float]] = deque()  # (arrival, arrival − device)
        self._last_device: float | None = None
        self._last_mapped: float | None = None
        self.resets = 0

    def map(self, device_t: float, arrival_t: float) -> float:
        while self._samples and self._samples[0][0] < arrival_t - self.window_s:
            self._samples.popleft()
        delta = arrival_t - device_t
        jumped_back = self._last_device is not None and device_t <= self._last_device
        off_timeline = bool(self._samples) and delta - self._best() > self.max_latency_s
        if jumped_back or off_timeline:
            self._samples.clear()
            self.resets += 1
        self._last_device = device_t
        self._samples.append((arrival_t, delta))
        t = device_t + self._best()
        if self._last_mapped is not None and t <= self._last_mapped:
            t = self._last_mapped + 1e-6
        self._last_mapped = t
        return t

    @property
    def offset(self) -> float | None:
        """The current device → station offset, s (``None`` before a frame)."""
        return self._best() if self._samples else None

    def _best(self) -> float:
        return min(delta for _, delta in self._samples)
