"""A camera's LeRobot video file: episodes appended one after another into one
H.264 MP4 at a constant frame rate (layout in ``proctor.export.lerobot``).

The station's MP4s carry capture times as presentation times (frames a real
camera delivers are not evenly spaced); LeRobot finds a frame by its nominal
time ``from_timestamp + k / fps``. So each episode is re-encoded: its frame
``k`` (chosen by ``proctor.export.lerobot_frames``) gets presentation time
``(first + k) / fps`` in the file, where ``first`` counts the frames of the
episodes before it. The actual capture times stay in the data as
``observation.capture_time``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Final

import av
import numpy as np

CODEC: Final = "libx264"  # Final: a literal, so PyAV types the stream as video
PIX_FMT = "yuv420p"


STATS_EVERY = 5  # frames; like LeRobot's, the image statistics are estimated on a sample
STATS_STEP = 2  # pixels: every other row and column of a sampled frame


@dataclass
class PixelStats:
    """Per-channel statistics of a sample of the frames written, scaled to
    [0, 1] as LeRobot's are."""

    count: int = 0
    total: np.ndarray = field(default_factory=lambda: np.zeros(3))
    squares: np.ndarray = field(default_factory=lambda: np.zeros(3))
    low: np.ndarray = field(default_factory=lambda: np.full(3, np.inf))
    high: np.ndarray = field(default_factory=lambda: np.full(3, -np.inf))

    def add(self, rgb: np.ndarray) -> None:
        pixels = rgb[::STATS_STEP, ::STATS_STEP].reshape(-1, 3)
        scaled = pixels.astype(np.float32) / 255.0
        self.count += 1
        self.total += scaled.mean(axis=0)
        self.squares += (scaled * scaled).mean(axis=0)
        self.low = np.minimum(self.low, pixels.min(axis=0) / 255.0)
        self.high = np.maximum(self.high, pixels.max(axis=0) / 255.0)

    def merge(self, other: PixelStats) -> None:
        self.count += other.count
        self.total += other.total
        self.squares += other.squares
        self.low = np.minimum(self.low, other.low)
        self.high = np.maximum(self.high, other.high)

    def as_lerobot(self) -> dict[str, Any]:
        """min/max/mean/std shaped (3, 1, 1); count is the number of frames."""
        n = max(self.count, 1)
        mean = self.total / n
        std = np.sqrt(np.maximum(self.squares / n - mean**2, 0.0))

        def shaped(v: np.ndarray) -> list[list[list[float]]]:
            return [[[float(x)]] for x in v]

        return {
            "min": shaped(self.low),
            "max": shaped(self.high),
            "mean": shaped(mean),
            "std": shaped(std),
            "count": [self.count],  # frames sampled
        }


class CameraVideo:
    """One output MP4 for one camera, appended to episode by episode."""

    def __init__(self, path: Path, fps: int, width: int, height: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fps = fps
        self.width, self.height = width, height
        self.frames = 0
        self.stats = PixelStats()
        self._out = av.open(str(path), "w")
        self._stream = self._out.add_stream(CODEC, rate=fps)
        self._stream.width, self._stream.height = width, height
        self._stream.pix_fmt = PIX_FMT
        self._stream.time_base = Fraction(1, fps)
        # every frame a keyframe would be huge; a short GOP keeps seeking cheap
        self._stream.options = {"g": str(2 * fps), "crf": "18", "preset": "veryfast"}

    @property
    def seconds(self) -> float:
        return self.frames / self.fps

    def append(self, source: Path, picks: np.ndarray) -> tuple[float, float]:
        """Encode the source frames ``picks`` (indices, non-decreasing) in order;
        returns the episode's (from_timestamp, to_timestamp) in this file."""
        start = self.seconds
        wanted = iter(int(i) for i in picks)
        target = next(wanted, None)
        with av.open(str(source)) as src:
            for position, decoded in enumerate(src.decode(video=0)):
                if target is None:
                    break
                frame: av.VideoFrame | None = None
                while target == position:
                    if frame is None:
                        frame = self._fitted(decoded)
                    self._write(frame)
                    target = next(wanted, None)
        if target is not None:
            raise ValueError(f"{source.name}: frame {target} is not in the video")
        return start, self.seconds

    def _fitted(self, frame: av.VideoFrame) -> av.VideoFrame:
        """The decoded frame in this file's size and pixel format (itself when it is)."""
        if (frame.width, frame.height, frame.format.name) == (self.width, self.height, PIX_FMT):
            return frame
        return frame.reformat(self.width, self.height, PIX_FMT)

    def _write(self, frame: av.VideoFrame) -> None:
        if self.frames % STATS_EVERY == 0:
            self.stats.add(frame.to_ndarray(format="rgb24"))
        frame.pts = self.frames
        frame.time_base = Fraction(1, self.fps)
        frame.pict_type = av.video.frame.PictureType.NONE
        for packet in self._stream.encode(frame):
            self._out.mux(packet)
        self.frames += 1

    def close(self) -> None:
        for packet in self._stream.encode():
            self._out.mux(packet)
        self._out.close()

    def info(self) -> dict[str, Any]:
        """The feature's ``info`` block in ``meta/info.json``."""
        return {
            "video.height": self.height,
            "video.width": self.width,
            "video.codec": "h264",
            "video.pix_fmt": PIX_FMT,
            "video.is_depth_map": False,
            "video.fps": self.fps,
            "video.channels": 3,
            "has_audio": False,
        }
