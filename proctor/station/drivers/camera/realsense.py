"""Intel RealSense colour stream through pyrealsense2's ``rs.pipeline``.

On the station the pipeline opens the camera with the configured serial
number; in the twin profile (and the tests) it opens a recording (``.db3``,
made with the SDK's software device, see ``realsense_record``) through the
very same pipeline path (``config.enable_device_from_file``).

Every frame carries the device's timestamp (``device_t``, seconds) and the
station-clock time of its capture, mapped from it (``DeviceClockMapper``). A
camera that delivers nothing within ``read``'s timeout raises
``CameraStalled``.

Images are copied out of the SDK's frame buffers: pyrealsense2 ties each
``get_data`` array to its frame (``keep_alive``), and frames still held by
the recorder's queues would otherwise exhaust librealsense's frame pool, so
the camera would drop frames at the source.

The colour sensor's exposure, white balance, power-line frequency and
``auto_exposure_priority`` are fixed at connect from the config (an
uncontrolled variable otherwise: images drift with the daylight between
episodes) and read back; ``describe()`` reports them, the timestamp domain of
the frames and the USB link, for the manifest and pre-flight. A recording
played back has no settable options: they are reported "not supported".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyrealsense2 as rs

from proctor.core.clock import Clock, MonotonicClock
from proctor.station.drivers.camera.base import CAMERAS, Camera, CameraConfig, CameraStalled, Frame
from proctor.station.drivers.camera.common import CameraUnavailable, DeviceClockMapper

log = logging.getLogger(__name__)

COLOR = rs.stream.color
# the colour formats we accept, and how to turn each into RGB
_TO_RGB = {
    rs.format.rgb8: lambda a: a,
    rs.format.bgr8: lambda a: a[..., ::-1],
}


@dataclass(frozen=True)
class RealSenseCameraConfig(CameraConfig):
    driver: ClassVar[str] = "realsense"
    # the camera's serial number (printed on it; ``rs-enumerate-devices``):
    # two identical D4xx on one station are told apart only by it. Serials
    # live in the station's deploy config, never in code. In playback, a set
    # serial must match the one the recording carries.
    serial: str = ""
    # a ``.db3`` recording to play instead of a device (twin profile, tests)
    playback_file: str | None = None
    # playback paced at the recorded frame rate (what the twin wants), or as
    # fast as frames are read (tests)
    playback_real_time: bool = True
    # loop the recording (the twin runs for as long as the operator likes)
    repeat_playback: bool = False
    # the window over which device time is mapped onto the station clock:
    # long enough to catch a low-latency frame, short enough that clock drift
    # (tens of ppm) stays far below a millisecond
    clock_window_s: float = 2.0
    # colour sensor settings (pyrealsense2 rs.option names), fixed at connect.
    # exposure: manual exposure, in the device's units (the number
    # realsense-viewer shows and rs.option.exposure's range; commission it
    # under the cell's lights); None keeps auto exposure on
    exposure: float | None = None
    # white balance in kelvin; None keeps auto white balance on
    white_balance: float | None = None
    # the mains frequency the lights flicker at: 50, 60, or 0 (no filter)
    power_line_hz: int | None = None
    # auto_exposure_priority 1 lets the sensor lower its frame rate in dim light
    # to expose longer; 0 holds the configured rate
    auto_exposure_priority: bool = False

    def __post_init__(self) -> None:
        if self.power_line_hz is not None and self.power_line_hz not in POWER_LINE:
            raise ValueError(
                f"camera {self.name}: power_line_hz must be one of "
                f"{', '.join(map(str, POWER_LINE))}, got {self.power_line_hz}"
            )


# rs.option.power_line_frequency's values as librealsense registers them for
# the D4xx colour sensor (src/ds/ds-color.cpp: 0 "Disabled", 1 "50Hz", 2 "60Hz",
# 3 "Auto"), which are the UVC power line frequency control's
POWER_LINE = {0: 0.0, 50: 1.0, 60: 2.0}
NOT_SUPPORTED = "not supported"


def color_options(config: RealSenseCameraConfig) -> list[tuple[str, float]]:
    """The (rs.option name, value) pairs ``config`` asks for, in the order they
    must be set: an auto mode is turned off before its manual value is set."""
    out: list[tuple[str, float]] = [
        ("auto_exposure_priority", 1.0 if config.auto_exposure_priority else 0.0)
    ]
    if config.exposure is None:
        out.append(("enable_auto_exposure", 1.0))
    else:
        out += [("enable_auto_exposure", 0.0), ("exposure", float(config.exposure))]
    if config.white_balance is None:
        out.append(("enable_auto_white_balance", 1.0))
    else:
        out += [("enable_auto_white_balance", 0.0), ("white_balance", float(config.white_balance))]
    if config.power_line_hz is not None:
        out.append(("power_line_frequency", POWER_LINE[config.power_line_hz]))
    return out


def apply_color_options(sensor: Any, config: RealSenseCameraConfig) -> dict[str, Any]:
    """Set the colour options ``config`` asks for on ``sensor``; return each
    one as the sensor reads it back, or "not supported" (a playback device, an
    older model). A device that refuses a supported value is an error."""
    applied: dict[str, Any] = {}
    for name, value in color_options(config):
        option = getattr(rs.option, name)
        if not sensor.supports(option) or sensor.is_option_read_only(option):
            applied[name] = NOT_SUPPORTED
            continue
        try:
            sensor.set_option(option, value)
        except RuntimeError as exc:
            raise CameraUnavailable(
                f"camera {config.name}: {name} = {value:g} refused by the device: {exc}"
            ) from exc
        applied[name] = sensor.get_option(option)
    return applied


@CAMERAS.register("realsense")
class RealSenseCamera(Camera[RealSenseCameraConfig]):
    config_class: ClassVar[type[RealSenseCameraConfig]] = RealSenseCameraConfig

    def __init__(self, config: RealSenseCameraConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or MonotonicClock()
        self._pipeline: Any = None
        self._playback: Any = None  # the playback device, when reading a recording
        self._mapper = DeviceClockMapper(config.clock_window_s)
        self.device_serial: str | None = None
        self.device_name: str | None = None
        self.stream_size: tuple[int, int] | None = None  # (width, height) actually streamed
        self.stream_fps: int | None = None
        self.usb_type: str | None = None  # the USB link the device reports ("3.2", "2.1")
        # the firmware and the one this librealsense recommends for the model
        # (camera_info.firmware_version / recommended_firmware_version); a
        # playback device reports neither: pre-flight's link line compares them
        self.firmware_version: str | None = None
        self.recommended_firmware_version: str | None = None
        self.options: dict[str, Any] = {}  # colour options as read back after connect
        self.timestamp_domain: str | None = None  # of the last frame read

    @property
    def source(self) -> str:
        c = self.config
        return f"playback {c.playback_file}" if c.playback_file else f"RealSense {c.serial}"

    def _rs_config(self) -> Any:
        c = self.config
        cfg = rs.config()
        if c.playback_file:
            path = Path(c.playback_file)
            if not path.is_file():
                raise CameraUnavailable(f"camera {c.name}: recording {path} does not exist")
            cfg.enable_device_from_file(str(path), repeat_playback=c.repeat_playback)
            # a recording holds what it holds: take its colour stream as is,
            # and check the size below
            cfg.enable_stream(COLOR)
            return cfg
        if not c.serial:
            raise CameraUnavailable(
                f"camera {c.name}: no serial number configured (set it in the station config)"
            )
        present = [d.get_info(rs.camera_info.serial_number) for d in rs.context().query_devices()]
        if c.serial not in present:
            raise CameraUnavailable(
                f"camera {c.name}: RealSense {c.serial} not found "
                f"(connected: {', '.join(present) or 'none'})"
            )
        cfg.enable_device(c.serial)
        cfg.enable_stream(COLOR, c.width, c.height, rs.format.rgb8, c.fps)
        return cfg

    def connect(self) -> None:
        if self._pipeline is not None:
            return
        c = self.config
        cfg = self._rs_config()
        pipeline = rs.pipeline()
        try:
            if c.playback_file:
                # the pace is set on the resolved device before streaming starts (the
                # config keeps what it resolved and start uses it): set after start,
                # the first frames play at real-time pace and a slow reader loses them
                cfg.resolve(rs.pipeline_wrapper(pipeline)).get_device().as_playback().set_real_time(
                    c.playback_real_time
                )
            profile = pipeline.start(cfg)
        except RuntimeError as exc:
            raise CameraUnavailable(f"camera {c.name}: {self.source} did not start: {exc}") from exc
        try:
            device = profile.get_device()
            if c.playback_file:
                self._playback = device.as_playback()
                self._playback.set_real_time(c.playback_real_time)
            self.device_serial = _info(device, rs.camera_info.serial_number)
            self.device_name = _info(device, rs.camera_info.name)
            self.usb_type = _info(device, rs.camera_info.usb_type_descriptor)
            self.firmware_version = _info(device, rs.camera_info.firmware_version)
            self.recommended_firmware_version = _info(
                device, rs.camera_info.recommended_firmware_version
            )
            video = profile.get_stream(COLOR).as_video_stream_profile()
            self.stream_size = (video.width(), video.height())
            self.stream_fps = video.fps()
            if video.format() not in _TO_RGB:
                raise CameraUnavailable(
                    f"camera {c.name}: colour format {video.format()} is not RGB8/BGR8"
                )
            if c.serial and self.device_serial != c.serial:
                raise CameraUnavailable(
                    f"camera {c.name}: {self.source} is serial {self.device_serial}, "
                    f"configured {c.serial}"
                )
            if self.stream_size != (c.width, c.height):
                raise CameraUnavailable(
                    f"camera {c.name}: {self.source} streams "
                    f"{self.stream_size[0]}x{self.stream_size[1]}, configured {c.width}x{c.height}"
                )
            self.options = apply_color_options(_color_sensor(device), c)
        except BaseException:
            pipeline.stop()
            raise
        self._pipeline = pipeline
        self._mapper = DeviceClockMapper(c.clock_window_s)

    def disconnect(self) -> None:
        pipeline, self._pipeline = self._pipeline, None
        playback, self._playback = self._playback, None
        if pipeline is not None:
            try:
                if playback is not None and not self.config.playback_real_time:
                    # a paced playback blocks on a full queue, and stopping it there
                    # races librealsense's own teardown (an abort, seen here about
                    # once in 60 stops): release the pace first
                    playback.set_real_time(True)
                pipeline.stop()
            except RuntimeError:
                log.warning("camera %s: pipeline stop failed", self.config.name, exc_info=True)

    @property
    def is_connected(self) -> bool:
        return self._pipeline is not None

    def read(self, timeout_s: float = 1.0) -> Frame:
        if self._pipeline is None:
            raise CameraUnavailable(f"camera {self.config.name} is not connected")
        ok, frames = self._pipeline.try_wait_for_frames(max(1, round(timeout_s * 1000)))
        if not ok:
            raise CameraStalled(
                f"camera {self.config.name} ({self.source}): no frame for {timeout_s:.2f} s"
            )
        arrival = self.clock.now()
        color = frames.get_color_frame()
        if not color:
            raise CameraStalled(f"camera {self.config.name}: frameset without a colour frame")
        fmt = color.get_profile().format()
        # a copy that owns its memory (for rgb8 the conversion is the SDK's own
        # buffer, and ascontiguousarray of a contiguous array is no copy): the
        # SDK frame is released as soon as this function returns
        image = np.array(_TO_RGB[fmt](np.asanyarray(color.get_data())), copy=True, order="C")
        device_t = color.get_timestamp() / 1000.0
        self.timestamp_domain = _domain_name(color.get_frame_timestamp_domain())
        return Frame(
            t=self._mapper.map(device_t, arrival),
            index=int(color.get_frame_number()),
            image=image,
            device_t=device_t,
        )

    @property
    def clock_offset(self) -> float | None:
        """Device → station clock offset currently in use, s."""
        return self._mapper.offset

    def describe(self) -> dict[str, Any]:
        """The settings in force, for the manifest and pre-flight."""
        return {
            "driver": "realsense",
            "serial": self.device_serial,
            "device": self.device_name,
            "source": "playback" if self.config.playback_file else "device",
            "usb_type": self.usb_type or NOT_SUPPORTED,
            "timestamp_domain": self.timestamp_domain,
            "options": dict(self.options),
        }


def _info(device: Any, field: Any) -> str | None:
    return device.get_info(field) if device.supports(field) else None


def _color_sensor(device: Any) -> Any:
    try:
        return device.first_color_sensor()
    except RuntimeError:
        # no sensor called colour (some playback files): the one streaming it
        return device.query_sensors()[0]


def _domain_name(domain: Any) -> str:
    # rs.timestamp_domain.hardware_clock → "hardware_clock"
    return str(domain).rpartition(".")[2]
