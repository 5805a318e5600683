"""RealSense recordings made without a camera: pyrealsense2's
``software_device`` with one colour stream, wrapped in ``rs.recorder``, writes
a ``.db3`` (ROS 2 bag) that the real ``rs.pipeline`` plays back exactly like
a file recorded from a D4xx.

The images are a SYNTHETIC TEST PATTERN — a gradient, a moving square and
the frame number written into the first pixels (``pattern_index``) — so
tests can check that every frame survives the trip byte for byte. They are
what the twin profile's cameras show.

``python -m proctor.station.drivers.camera.realsense_record OUT.db3 --width 640
--height 480 --fps 30 --frames 90 --serial TWIN0001``
"""

from __future__ import annotations

import argparse
import gc
from pathlib import Path

import numpy as np
import pyrealsense2 as rs

from proctor.core.clock import Clock, MonotonicClock

# device time of the first frame, ms (the D4xx hardware clock starts from an
# arbitrary point too; a non-zero start catches code that assumes zero)
DEFAULT_START_MS = 123_456.0
INDEX_PIXELS = 4  # the frame number, little endian, one byte per pixel of row 0 (red channel)


def pattern(index: int, width: int, height: int) -> np.ndarray:
    """Frame ``index`` of the test pattern (H×W×3 uint8, RGB)."""
    y, x = np.mgrid[0:height, 0:width]
    image = np.empty((height, width, 3), np.uint8)
    image[..., 0] = (x * 255 // max(1, width - 1)).astype(np.uint8)
    image[..., 1] = (y * 255 // max(1, height - 1)).astype(np.uint8)
    image[..., 2] = 64
    side = max(4, min(width, height) // 6)
    x0 = (index * 7) % max(1, width - side)
    y0 = (height - side) // 2
    image[y0 : y0 + side, x0 : x0 + side] = (255, 255, 255)
    image[0, :INDEX_PIXELS, 0] = np.frombuffer(
        int(index).to_bytes(INDEX_PIXELS, "little"), np.uint8
    )
    return image


def pattern_index(image: np.ndarray) -> int:
    """The frame number a pattern image carries."""
    return int.from_bytes(bytes(image[0, :INDEX_PIXELS, 0].tolist()), "little")


def record_pattern(
    path: Path,
    *,
    width: int = 640,
    height: int = 480,
    fps: int = 30,
    frames: int = 90,
    serial: str = "SOFTWARE0001",
    name: str = "Proctor software camera (test pattern)",
    start_ms: float = DEFAULT_START_MS,
    real_time: bool = True,
    clock: Clock | None = None,
    domain: str = "hardware_clock",
) -> Path:
    """Write ``frames`` frames of the test pattern to ``path`` (.db3).

    Playback follows the times at which the recorder *received* the frames,
    not their device timestamps, so by default the frames are fed at ``fps``
    on ``clock`` and the recording takes as long as it lasts. A burst
    (``real_time=False``) is instant to make, but its playback starts with
    every frame already due: the pipeline drops some before a non-real-time
    playback setting takes effect. ``domain`` names the frames'
    ``rs.timestamp_domain`` (a camera without metadata stamps ``system_time``)."""
    pace = (clock or MonotonicClock()) if real_time else None
    path = Path(path)
    if path.suffix != ".db3":
        raise ValueError(f"RealSense 2.5x records ROS 2 bags: {path} must end in .db3")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    device = rs.software_device()
    device.register_info(rs.camera_info.serial_number, serial)
    device.register_info(rs.camera_info.name, name)
    sensor = device.add_sensor("RGB Camera")
    intrinsics = rs.intrinsics()
    intrinsics.width, intrinsics.height = width, height
    intrinsics.ppx, intrinsics.ppy = width / 2, height / 2
    intrinsics.fx = intrinsics.fy = float(width)  # a ~53° lens: plausible, never used
    intrinsics.model = rs.distortion.none
    intrinsics.coeffs = [0.0] * 5
    stream = rs.video_stream()
    stream.type, stream.index, stream.uid = rs.stream.color, 0, 0
    stream.width, stream.height, stream.fps = width, height, fps
    stream.bpp, stream.fmt, stream.intrinsics = 3, rs.format.rgb8, intrinsics
    profile = sensor.add_video_stream(stream).as_video_stream_profile()
    recorder = rs.recorder(str(path), device)
    queue = rs.frame_queue(frames + 1)
    sensor.open(profile)
    sensor.start(queue)
    t0 = pace.now() if pace is not None else 0.0
    try:
        for i in range(frames):
            if pace is not None:
                pace.sleep_until(t0 + i / fps)
            frame = rs.software_video_frame()
            frame.pixels = pattern(i, width, height)
            frame.bpp, frame.stride = 3, width * 3
            frame.timestamp = start_ms + i * 1000.0 / fps
            frame.domain = getattr(rs.timestamp_domain, domain)
            frame.frame_number = i
            frame.profile = profile
            sensor.on_video_frame(frame)
    finally:
        sensor.stop()
        sensor.close()
        # the bag is finalised when the recorder goes away
        del recorder, sensor, device, queue
        gc.collect()
    if not path.is_file() or path.stat().st_size == 0:
        raise RuntimeError(f"the RealSense recorder wrote nothing to {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A RealSense test-pattern recording (.db3)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--frames", type=int, default=90)
    parser.add_argument("--serial", default="SOFTWARE0001")
    parser.add_argument(
        "--burst",
        action="store_true",
        help="write all frames at once instead of at --fps (instant, but playback drops some)",
    )
    args = parser.parse_args(argv)
    record_pattern(
        args.out,
        width=args.width,
        height=args.height,
        fps=args.fps,
        frames=args.frames,
        serial=args.serial,
        real_time=not args.burst,
    )
    print(args.out)  # noqa: T201 - the path is the command's output
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
