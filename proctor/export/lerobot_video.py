"""A camera's LeRobot video files: episodes appended one after another into
one H.264 MP4 at a constant frame rate (layout in ``proctor.export.lerobot``).

The station's MP4s carry capture times as presentation times (frames a real
camera delivers are not evenly spaced); LeRobot finds a frame by its nominal
time ``from_timestamp + k / fps``. So an episode's frame ``k`` (chosen by
``proctor.export.lerobot_frames``) gets presentation time ``(first + k) / fps``
in the file, where ``first`` counts the frames of the episodes before it. The
actual capture times stay in the data as ``observation.capture_time``.

Two ways to get there (``VideoMode``):

- **copy** (the default): when the episode uses every recorded frame once, in
  order (``picks`` is ``0 … n-1``), and the recording is H.264 in the file's
  size and pixel format with presentation order equal to decode order (the
  station's recorder writes no B-frames: x264's ``zerolatency``), its packets
  are copied as they are with new timestamps. Nothing is decoded except a few
  keyframes for the pixel statistics; the pictures are bit-for-bit the
  recording's. Episodes copied into one file share the recording's codec
  parameters (its ``avcC``): a recording with other parameters (another
  preset, CRF or size at the station) goes to a file of its own.
- **reencode**: every chosen frame decoded and re-encoded (a frame repeated or
  skipped where another camera's nearest frame says so, a size changed). Used
  for the episodes copy cannot take, and for all of them when asked
  (``proctor export --reencode``).
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from pathlib import Path
from typing import Any, Final

import av
import numpy as np

CODEC: Final = "libx264"  # Final: a literal, so PyAV types the stream as video
PIX_FMT = "yuv420p"


STATS_EVERY = 5  # frames; like LeRobot's, the image statistics are estimated on a sample
STATS_STEP = 2  # pixels: every other row and column of a sampled frame
# a copied episode's sample: keyframes only (decoding the others means decoding all),
# at most this many, spread over the episode
STATS_KEYFRAMES = 4


_LEVELS = np.arange(256) / 255.0  # a pixel value's level, scaled as LeRobot's
_CHANNEL_OFFSET = np.array([0, 256, 512])  # each channel's bins in one bincount


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
        # one histogram of the sampled pixels per channel gives all four figures
        # exactly, at a fifth of the time of float arithmetic on every pixel
        pixels = np.ascontiguousarray(rgb[::STATS_STEP, ::STATS_STEP]).reshape(-1, 3)
        binned = pixels.astype(np.intp) + _CHANNEL_OFFSET
        counts = np.bincount(binned.ravel(), minlength=3 * 256).reshape(3, 256)
        n = len(pixels)
        self.count += 1
        self.total += counts @ _LEVELS / n
        self.squares += counts @ (_LEVELS * _LEVELS) / n
        present = counts > 0
        self.low = np.minimum(self.low, present.argmax(axis=1) / 255.0)
        self.high = np.maximum(self.high, (255 - present[:, ::-1].argmax(axis=1)) / 255.0)

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


class VideoMode(StrEnum):
    copy = "copy"  # stream-copy every episode that allows it, re-encode the rest
    reencode = "reencode"  # re-encode every episode


class SourceVideo:
    """A recorded MP4, open, and what its packets say about it (read once,
    nothing decoded): whether they can be copied into an export file as
    they are. The file is opened once; each pass starts from its beginning."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._src = av.open(str(path))
        try:
            self._read(self._src)
        except BaseException:
            self._src.close()
            raise

    def _read(self, src: av.container.InputContainer) -> None:
        self.stream = src.streams.video[0]
        ctx = self.stream.codec_context
        self.codec: str = ctx.name
        self.width: int = ctx.width
        self.height: int = ctx.height
        self.pix_fmt: str | None = ctx.pix_fmt
        # the codec parameters (H.264's avcC) every packet relies on
        self.extradata = bytes(ctx.extradata or b"")
        pts: list[int] = []
        keyframes: list[int] = []
        for packet in self._packets():
            if packet.is_keyframe:
                keyframes.append(len(pts))
            pts.append(packet.pts if packet.pts is not None else -1)
        self.packets = len(pts)
        self.keyframes = tuple(keyframes)  # positions of the keyframe packets
        # presentation order is decode order (no B-frames)
        self.in_order = min(pts, default=0) >= 0 and all(a < b for a, b in itertools.pairwise(pts))

    def __enter__(self) -> SourceVideo:
        return self

    def __exit__(self, *exc: object) -> None:
        self._src.close()

    def _packets(self) -> Iterator[av.Packet]:
        for packet in self._src.demux(self.stream):
            if packet.dts is not None:  # None: the demuxer's empty flush packet
                yield packet

    def read_packets(self) -> Iterator[av.Packet]:
        """Every packet, in decode order, from the first (for a copyable
        recording, whose first packet is a keyframe: a seek to 0 lands on it)."""
        self._src.seek(0, stream=self.stream)
        return self._packets()

    def read_frames(self) -> Iterator[av.VideoFrame]:
        """Every frame decoded, in order, from the first. The file is opened
        again rather than sought to its start: this is the path for recordings
        that cannot be copied, and a seek to 0 fails on an MP4 whose first
        sample is no keyframe."""
        self._src.close()
        self._src = av.open(str(self.path))
        self.stream = self._src.streams.video[0]
        return self._src.decode(self.stream)

    def decode_alone(self, packet: av.Packet | None) -> list[av.VideoFrame]:
        """A keyframe's picture (H.264 IDR: it refers to no other frame);
        ``None`` flushes what a threaded decoder still holds."""
        return list(self.stream.codec_context.decode(packet))

    def copyable(self, picks: np.ndarray, width: int, height: int) -> bool:
        """Whether copying the packets gives exactly the frames ``picks``
        asks for, in a file of ``width``×``height`` H.264 ``PIX_FMT``."""
        return (
            self.codec == "h264"
            and self.pix_fmt == PIX_FMT
            and (self.width, self.height) == (width, height)
            and bool(self.extradata)
            and self.in_order
            and self.keyframes[:1] == (0,)
            and np.array_equal(picks, np.arange(self.packets))
        )


class CameraVideo(ABC):
    """One output MP4 for one camera, appended to episode by episode."""

    def __init__(self, path: Path, fps: int, width: int, height: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fps = fps
        self.width, self.height = width, height
        self.frames = 0
        self.stats = PixelStats()
        self._out = av.open(str(path), "w")

    @property
    def seconds(self) -> float:
        return self.frames / self.fps

    @abstractmethod
    def append(self, source: SourceVideo, picks: np.ndarray) -> tuple[float, float]:
        """Add the source frames ``picks`` (indices, non-decreasing) in order;
        returns the episode's (from_timestamp, to_timestamp) in this file."""

    @abstractmethod
    def close(self) -> None: ...

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


class CopiedVideo(CameraVideo):
    """A file of recordings' packets copied as they are (see the module's
    docstring); every episode in it has the first one's codec parameters."""

    def __init__(self, path: Path, fps: int, template: SourceVideo) -> None:
        super().__init__(path, fps, template.width, template.height)
        self.extradata = template.extradata
        self._stream = self._out.add_stream_from_template(template.stream)
        self._stream.time_base = Fraction(1, fps)

    def append(self, source: SourceVideo, picks: np.ndarray) -> tuple[float, float]:
        if not source.copyable(picks, self.width, self.height):
            raise ValueError(f"{source.path.name}: its packets are not these frames")
        if source.extradata != self.extradata:
            raise ValueError(f"{source.path.name}: other codec parameters than this file's")
        start = self.seconds
        sampled = set(_spread(source.keyframes, STATS_KEYFRAMES))
        for position, packet in enumerate(source.read_packets()):
            if position in sampled:
                for frame in source.decode_alone(packet):
                    self.stats.add(frame.to_ndarray(format="rgb24"))
            packet.stream = self._stream
            packet.time_base = Fraction(1, self.fps)
            packet.pts = packet.dts = self.frames
            packet.duration = 1
            self._out.mux(packet)
            self.frames += 1
        for frame in source.decode_alone(None):
            self.stats.add(frame.to_ndarray(format="rgb24"))
        if self.frames - round(start * self.fps) != source.packets:
            raise ValueError(f"{source.path.name}: the second reading found other packets")
        return start, self.seconds

    def close(self) -> None:
        self._out.close()


def _spread(positions: tuple[int, ...], most: int) -> list[int]:
    """At most ``most`` of ``positions``, evenly spread, the first included."""
    if len(positions) <= most:
        return list(positions)
    return [positions[i] for i in np.linspace(0, len(positions) - 1, most).round().astype(int)]


class EncodedVideo(CameraVideo):
    """A file whose frames are decoded from the recordings and re-encoded."""

    def __init__(self, path: Path, fps: int, width: int, height: int) -> None:
        super().__init__(path, fps, width, height)
        self._stream = self._out.add_stream(CODEC, rate=fps)
        self._stream.width, self._stream.height = width, height
        self._stream.pix_fmt = PIX_FMT
        self._stream.time_base = Fraction(1, fps)
        # every frame a keyframe would be huge; a short GOP keeps seeking cheap
        self._stream.options = {"g": str(2 * fps), "crf": "18", "preset": "veryfast"}

    def append(self, source: SourceVideo, picks: np.ndarray) -> tuple[float, float]:
        start = self.seconds
        wanted = iter(int(i) for i in picks)
        target = next(wanted, None)
        for position, decoded in enumerate(source.read_frames()):
            if target is None:
                break
            frame: av.VideoFrame | None = None
            while target == position:
                if frame is None:
                    frame = self._fitted(decoded)
                self._write(frame)
                target = next(wanted, None)
        if target is not None:
            raise ValueError(f"{source.path.name}: frame {target} is not in the video")
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
