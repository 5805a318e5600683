"""Pre-flight's link line compares a RealSense camera's firmware with the one
its librealsense recommends (second hardware review, nit): older warns; a
device that reports none (a playback device) says "not reported"."""

from __future__ import annotations

from typing import Any

from proctor.station.drivers.camera.base import Camera, Frame
from proctor.station.preflight import CheckStatus, PreflightSettings, check_camera_link


class FakeCamera(Camera[Any]):
    """Connected; reports a USB 3 link, the camera's own clock and the given
    firmware, as the RealSense driver reads them at connect."""

    def __init__(self, firmware: str | None, recommended: str | None) -> None:
        self.firmware_version = firmware
        self.recommended_firmware_version = recommended

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    @property
    def is_connected(self) -> bool:
        return True

    def read(self, timeout_s: float = 1.0) -> Frame:
        raise AssertionError("not read: the link facts are reported")

    def describe(self) -> dict[str, Any]:
        return {"driver": "realsense", "usb_type": "3.2", "timestamp_domain": "hardware_clock"}


def link(firmware: str | None, recommended: str | None) -> Any:
    return check_camera_link("wrist", FakeCamera(firmware, recommended), PreflightSettings())


def test_older_firmware_warns_naming_both() -> None:
    result = link("5.13.0.50", "5.16.0.1")
    assert result.status is CheckStatus.warning
    assert "firmware 5.13.0.50 is older than the recommended 5.16.0.1" in result.detail


def test_versions_compare_part_by_part_as_numbers() -> None:
    # as strings "5.9" > "5.16"; as versions it is older
    assert link("5.9.2.0", "5.16.0.1").status is CheckStatus.warning
    assert link("5.16.0.1", "5.9.2.0").status is CheckStatus.passed


def test_current_or_newer_firmware_passes() -> None:
    for have in ("5.16.0.1", "5.17.0.9"):
        result = link(have, "5.16.0.1")
        assert result.status is CheckStatus.passed
        assert result.detail.endswith(f"firmware {have} (recommended 5.16.0.1)")


def test_a_device_that_reports_no_firmware_says_so() -> None:
    result = link(None, None)
    assert result.status is CheckStatus.passed
    assert result.detail == "timestamps hardware_clock, USB 3.2, firmware not reported"
    assert link("5.16.0.1", None).detail.endswith("(no recommended version reported)")
