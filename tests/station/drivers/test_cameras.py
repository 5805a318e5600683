"""Camera drivers.

RealSense: recordings are made with pyrealsense2's software device (a
SYNTHETIC TEST PATTERN, see ``realsense_record``) and played back through the
real ``rs.pipeline`` path, then into the station's recorder.

UVC: there is no camera on this machine. The V4L2 path is exercised as far
as it goes without one (opening fails, clearly); streaming and stall
detection are exercised by OpenCV's FFmpeg backend playing a VIDEO FILE
through the driver's same grabber thread — a stand-in source, not a camera.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from pathlib import Path

import av
import cv2
import numpy as np
import pyarrow.parquet as pq
import pytest

from proctor.core.clock import MonotonicClock
from proctor.station.drivers.camera import CAMERAS, CameraStalled
from proctor.station.drivers.camera.common import CameraUnavailable, DeviceClockMapper
from proctor.station.drivers.camera.realsense import RealSenseCamera, RealSenseCameraConfig
from proctor.station.drivers.camera.realsense_record import (
    DEFAULT_START_MS,
    pattern,
    pattern_index,
    record_pattern,
)
from proctor.station.drivers.camera.uvc import UvcCamera, UvcCameraConfig
from proctor.station.recorder import Recorder, VideoSettings, finalize_spool

pytestmark = pytest.mark.hardware

W, H, FPS = 64, 48, 30
SERIAL = "TEST0001"


def test_registry_finds_the_drivers() -> None:
    assert CAMERAS.get("realsense") is RealSenseCamera
    assert CAMERAS.get("uvc") is UvcCamera


# -- device clock → station clock ---------------------------------------------


def test_clock_mapper_recovers_capture_times_from_noisy_arrivals() -> None:
    rng = np.random.default_rng(7)
    true_offset = 1000.0  # station = device + 1000 s
    capture_device = 5.0 + np.arange(300) / 30.0
    # transfer latency: 2 ms floor plus a heavy tail (USB, a busy host)
    latency = 0.002 + rng.exponential(0.004, size=capture_device.size)
    arrival = capture_device + true_offset + latency
    mapper = DeviceClockMapper(window_s=2.0)
    mapped = np.array([mapper.map(d, a) for d, a in zip(capture_device, arrival, strict=True)])
    assert np.all(np.diff(mapped) > 0)
    assert np.all(mapped <= arrival + 1e-9)  # never after the frame arrived
    error = mapped - (capture_device + true_offset)
    # after the first window the error is the window's smallest latency
    assert np.all(error[60:] >= 0) and np.all(error[60:] < 0.0025)
    assert np.median(np.abs(np.diff(mapped) - 1 / 30)) < 1e-3


def test_clock_mapper_starts_afresh_when_the_device_clock_jumps_back() -> None:
    mapper = DeviceClockMapper()
    t1 = mapper.map(10.0, 100.0)
    t2 = mapper.map(0.5, 100.04)  # camera reset (or a looping playback)
    assert mapper.resets == 1
    assert t2 > t1 and t2 == pytest.approx(100.04)


def test_clock_mapper_starts_afresh_after_a_loop_it_did_not_see() -> None:
    """A 1 s looping playback, read twice (commissioning), left unread for
    1.6 s, then read steadily (pre-flight): by then it has looped and its
    device time is past the last one seen, so no jump back shows; the old
    samples, one loop off, must not set the offset (they did: the frames
    mapped ~1 s early, then jumped at the next loop, and pre-flight measured
    7 fps of a 15 fps camera)."""
    period, loop = 1 / 15, 15  # frames 0..14 at device 123.456 + i / 15
    mapper = DeviceClockMapper(window_s=2.0)

    def device(i: int) -> float:
        return 123.456 + (i % loop) * period

    mapper.map(device(0), 100.0)
    mapper.map(device(1), 100.0 + period)
    # 1.6 s later, frames 24.. (loop 1, frames 9..): read as they come
    arrivals = [101.6 + k * period for k in range(12)]
    mapped = [mapper.map(device(24 + k), a) for k, a in enumerate(arrivals)]
    assert mapper.resets >= 1
    # each frame mapped at most a transfer latency before its arrival, and
    # across the loop's end (frame 14 → 0) the step is a frame period
    for t, a in zip(mapped, arrivals, strict=True):
        assert a - 0.01 <= t <= a + 1e-9
    assert max(b - a for a, b in itertools.pairwise(mapped)) < 1.5 * period


def test_clock_mapper_keeps_its_estimate_through_an_ordinary_late_frame() -> None:
    """A frame that arrives 80 ms late (a busy host) is not a new timeline."""
    mapper = DeviceClockMapper(window_s=2.0)
    for i in range(20):
        mapper.map(5.0 + i / 30, 1000.0 + i / 30 + 0.002)
    late = mapper.map(5.0 + 20 / 30, 1000.0 + 20 / 30 + 0.08)
    assert mapper.resets == 0
    assert late == pytest.approx(1000.0 + 20 / 30 + 0.002)


# -- RealSense through rs.pipeline --------------------------------------------


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One second of the pattern at 30 fps (recorded in real time: 1 s)."""
    path = tmp_path_factory.mktemp("rs") / "exterior.db3"
    return record_pattern(path, width=W, height=H, fps=FPS, frames=30, serial=SERIAL)


def rs_config(path: Path, **overrides: object) -> RealSenseCameraConfig:
    values: dict[str, object] = {
        "name": "exterior",
        "width": W,
        "height": H,
        "fps": FPS,
        "serial": SERIAL,
        "playback_file": str(path),
        "playback_real_time": False,
    }
    values.update(overrides)
    return RealSenseCameraConfig(**values)  # type: ignore[arg-type]


def test_realsense_playback_delivers_every_frame_with_device_timestamps(
    recording: Path,
) -> None:
    cam = RealSenseCamera(rs_config(recording))
    with cam:
        assert cam.device_serial == SERIAL
        assert cam.stream_size == (W, H) and cam.stream_fps == FPS
        frames = [cam.read(timeout_s=2.0) for _ in range(30)]
    assert [f.index for f in frames] == list(range(30))
    for i, f in enumerate(frames):
        assert f.image.shape == (H, W, 3) and f.image.dtype == np.uint8
        assert pattern_index(f.image) == i
        assert np.array_equal(f.image, pattern(i, W, H))  # RGB, byte for byte
        assert f.device_t == pytest.approx((DEFAULT_START_MS + i * 1000 / FPS) / 1000)
    ts = np.array([f.t for f in frames])
    assert np.all(np.diff(ts) > 0)


def _owner(array: np.ndarray) -> object:
    """The object that owns ``array``'s memory (itself, when it owns it)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array if array.base is None else array.base


def test_realsense_frames_are_copied_out_of_the_sdk_buffers(recording: Path) -> None:
    """pyrealsense2 ties each get_data() array to its frame: an image that is
    a view of it keeps the SDK frame alive in the recorder's queues, and the
    frame pool runs dry. Every image owns its memory, and holding many does
    not hold the SDK's frames."""
    with RealSenseCamera(rs_config(recording)) as cam:
        frames = [cam.read(timeout_s=2.0) for _ in range(30)]
    for i, f in enumerate(frames):
        owner = _owner(f.image)
        assert owner is f.image or isinstance(owner, bytes | bytearray), type(owner)
        assert not type(owner).__module__.startswith("pyrealsense2")
        assert f.image.flags.c_contiguous and f.image.flags.writeable
        assert pattern_index(f.image) == i  # the copy is the frame, byte for byte


def test_realsense_playback_reports_its_settings_honestly(recording: Path) -> None:
    """A recording has no settable colour options: each is "not supported",
    never a made-up value; the timestamp domain is the frames' own."""
    cam = RealSenseCamera(rs_config(recording, exposure=150.0, power_line_hz=50))
    with cam:
        cam.read(timeout_s=2.0)
        described = cam.describe()
    assert described["serial"] == SERIAL and described["source"] == "playback"
    assert described["timestamp_domain"] == "hardware_clock"
    assert described["usb_type"] == "not supported"
    assert set(described["options"]) == {
        "auto_exposure_priority", "enable_auto_exposure", "exposure",
        "enable_auto_white_balance", "power_line_frequency",
    }  # fmt: skip
    assert set(described["options"].values()) == {"not supported"}


def test_colour_options_are_set_in_order_and_read_back() -> None:
    """On a sensor that has the options (pyrealsense2's software sensor, with
    the D4xx colour sensor's option names): auto modes off before the manual
    values, each read back; a value the device refuses names the option."""
    import pyrealsense2 as rs

    from proctor.station.drivers.camera.realsense import apply_color_options, color_options

    device = rs.software_device()
    sensor = device.add_sensor("Color")
    for name, lo, hi, default in [
        ("auto_exposure_priority", 0, 1, 1), ("enable_auto_exposure", 0, 1, 1),
        ("exposure", 1, 10000, 156), ("enable_auto_white_balance", 0, 1, 1),
        ("white_balance", 2800, 6500, 4600), ("power_line_frequency", 0, 3, 3),
    ]:  # fmt: skip
        # option_range(min, max, default, step), as pyrealsense2 takes it
        sensor.add_option(getattr(rs.option, name), rs.option_range(lo, hi, default, 1), True)
    config = RealSenseCameraConfig(
        name="wrist", exposure=300.0, white_balance=4000.0, power_line_hz=60
    )
    names = [n for n, _ in color_options(config)]
    assert names.index("enable_auto_exposure") < names.index("exposure")
    assert names.index("enable_auto_white_balance") < names.index("white_balance")
    applied = apply_color_options(sensor, config)
    assert applied == {
        "auto_exposure_priority": 0.0, "enable_auto_exposure": 0.0, "exposure": 300.0,
        "enable_auto_white_balance": 0.0, "white_balance": 4000.0, "power_line_frequency": 2.0,
    }  # fmt: skip
    with pytest.raises(CameraUnavailable, match="exposure = 20000 refused"):
        apply_color_options(sensor, RealSenseCameraConfig(name="wrist", exposure=20000.0))
    with pytest.raises(ValueError, match="power_line_hz must be one of"):
        RealSenseCameraConfig(name="wrist", power_line_hz=55)


def test_realsense_stall_is_reported_within_the_timeout(recording: Path) -> None:
    """The recording ends: from then on the pipeline delivers nothing, as a
    camera that stopped streaming would."""
    with RealSenseCamera(rs_config(recording)) as cam:
        for _ in range(30):
            cam.read(timeout_s=2.0)
        t0 = time.monotonic()
        with pytest.raises(CameraStalled, match=r"no frame for 0\.50 s"):
            cam.read(timeout_s=0.5)
        assert 0.45 < time.monotonic() - t0 < 1.0


def test_realsense_real_time_playback_maps_device_time_onto_the_station_clock(
    recording: Path,
) -> None:
    clock = MonotonicClock()
    cam = RealSenseCamera(rs_config(recording, playback_real_time=True), clock=clock)
    with cam:
        frames, reads = [], []
        # real-time playback drops the frames a late reader misses, as a camera
        # does: read until the 1 s recording runs out, however many got through
        # (reading 25 of its 30 stalled at a load of 14 on two cores)
        with contextlib.suppress(CameraStalled):
            while len(frames) < 30:
                frames.append(cam.read(timeout_s=2.0))
                reads.append(clock.now())
    assert len(frames) >= 5, f"only {len(frames)} of 30 frames were read"
    t = np.array([f.t for f in frames])
    d = np.array([f.device_t for f in frames])
    # capture times follow the device's spacing, not the host's scheduling
    assert np.median(np.abs(np.diff(t) - np.diff(d))) < 0.002
    # on the station clock, never after the frame reached us...
    late = np.array(reads) - t
    assert np.all(late >= 0)
    # ...and anchored on it: the offset is the least-delayed frame's, so that
    # frame maps to about when it was read. Not every frame: on a loaded machine
    # a frame can reach the test long after its capture, and its mapped time
    # rightly says so
    assert np.min(late) < 0.1
    assert cam.clock_offset is not None


def test_realsense_refuses_a_recording_that_does_not_match_the_config(
    recording: Path, tmp_path: Path
) -> None:
    with pytest.raises(CameraUnavailable, match="streams 64x48, configured 640x480"):
        RealSenseCamera(rs_config(recording, width=640, height=480)).connect()
    with pytest.raises(CameraUnavailable, match=f"serial {SERIAL}, configured OTHER"):
        RealSenseCamera(rs_config(recording, serial="OTHER")).connect()
    with pytest.raises(CameraUnavailable, match="does not exist"):
        RealSenseCamera(rs_config(tmp_path / "missing.db3")).connect()


def test_realsense_without_a_camera_says_which_serial_is_missing() -> None:
    cam = RealSenseCamera(RealSenseCameraConfig(name="wrist", serial="123456789012"))
    with pytest.raises(CameraUnavailable, match="RealSense 123456789012 not found"):
        cam.connect()
    with pytest.raises(CameraUnavailable, match="no serial number configured"):
        RealSenseCamera(RealSenseCameraConfig(name="wrist")).connect()


def test_realsense_playback_into_the_station_recorder(recording: Path, tmp_path: Path) -> None:
    """Frames from the pipeline go through the station's recorder (the one
    episodes use) into an H.264 MP4 and a frame table."""
    cam = RealSenseCamera(rs_config(recording))
    spool = tmp_path / "spool"
    with cam:
        first = cam.read(timeout_s=2.0)
        recorder = Recorder(
            spool,
            t0=first.t,
            cameras={"exterior": VideoSettings(W, H, FPS)},
            telemetry_hz=100,
            segment_s=2.0,
            virtual_clock=True,  # block rather than drop: the test wants every frame
            state={"test": "realsense playback"},
        )
        recorder.add_frame("exterior", first)
        for _ in range(29):
            recorder.add_frame("exterior", cam.read(timeout_s=2.0))
    result = recorder.close()
    assert result.cameras["exterior"].frames == 30
    assert result.cameras["exterior"].dropped == 0
    assert result.cameras["exterior"].device_gaps == 0
    final = finalize_spool(spool, ["exterior"])
    mp4, n = final.videos["exterior"]
    assert n == 30
    with av.open(str(mp4)) as container:
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(decoded) == 30 and decoded[0].shape == (H, W, 3)
    # lossy H.264, but the picture is the pattern: the white square is where it was
    for i in (0, 15, 29):
        assert np.mean(np.abs(decoded[i].astype(int) - pattern(i, W, H).astype(int))) < 12
    table = pq.read_table(final.frame_tables["exterior"]).to_pydict()
    assert table["device_index"] == list(range(30))
    assert np.allclose(table["device_t"], (DEFAULT_START_MS + np.arange(30) * 1000 / FPS) / 1000)
    assert np.all(np.diff(table["t"]) > 0)


# -- UVC through OpenCV ---------------------------------------------------------


@pytest.fixture(scope="module")
def video_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A STAND-IN SOURCE: 15 MJPG frames in an AVI, played through the UVC
    driver's grabber by OpenCV's FFmpeg backend."""
    path = tmp_path_factory.mktemp("uvc") / "wrist.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), FPS, (W, H))
    if not writer.isOpened():
        pytest.fail("OpenCV cannot write MJPG/AVI here")
    for i in range(15):
        writer.write(cv2.cvtColor(pattern(i, W, H), cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def uvc_config(device: str, **overrides: object) -> UvcCameraConfig:
    values: dict[str, object] = {"name": "wrist", "device": device, "width": W, "height": H}
    values.update({"fps": FPS, **overrides})
    return UvcCameraConfig(**values)  # type: ignore[arg-type]


def test_uvc_file_source_streams_at_the_configured_rate(video_file: Path) -> None:
    with UvcCamera(uvc_config(str(video_file))) as cam:
        frames = [cam.read(timeout_s=1.0) for _ in range(14)]
    assert [f.index for f in frames] == list(range(14))
    for i, f in enumerate(frames):
        assert f.image.shape == (H, W, 3)
        # MJPG is lossy; the moving square is still where frame i put it
        assert np.mean(np.abs(f.image.astype(int) - pattern(i, W, H).astype(int))) < 12
    ts = np.array([f.t for f in frames])
    assert np.all(np.diff(ts) > 0)
    assert np.median(np.diff(ts)) == pytest.approx(1 / FPS, abs=0.005)


def test_uvc_stall_detected_within_a_second(video_file: Path) -> None:
    """SOURCE STOPS: the file runs out, as a camera that stops streaming."""
    with UvcCamera(uvc_config(str(video_file))) as cam:
        for _ in range(15):
            cam.read(timeout_s=1.0)
        t0 = time.monotonic()
        with pytest.raises(CameraStalled, match="end of file"):
            cam.read(timeout_s=1.0)
        assert time.monotonic() - t0 < 1.2


def test_uvc_open_failures_are_clear(video_file: Path, tmp_path: Path) -> None:
    with pytest.raises(CameraUnavailable, match="UVC device /dev/video97 does not exist"):
        UvcCamera(uvc_config("/dev/video97")).connect()
    with pytest.raises(CameraUnavailable, match="OpenCV could not open /dev/null"):
        UvcCamera(uvc_config("/dev/null")).connect()
    with pytest.raises(CameraUnavailable, match=r"video file .* does not exist"):
        UvcCamera(uvc_config(str(tmp_path / "none.avi"))).connect()
    with pytest.raises(CameraUnavailable, match="delivers 64x48, configured 640x480"):
        UvcCamera(uvc_config(str(video_file), width=640, height=480)).connect()
    cam = UvcCamera(uvc_config(str(video_file)))
    with pytest.raises(CameraUnavailable, match="not connected"):
        cam.read()
