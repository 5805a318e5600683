"""The SpaceMouse's USB HID interface through hidapi.

Only opening the device and reading raw reports happen here (hidapi is a
hardware library and stays under ``proctor/station/drivers/``); parsing the reports
into a twist is ``proctor.station.teleop.spacemouse``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import hid

# USB vendor ids: 3Dconnexion's own, and Logitech's from before 2011
VENDOR_3DCONNEXION = 0x256F
VENDOR_LOGITECH = 0x046D
# Logitech-era 3Dconnexion products (SpaceNavigator, SpaceExplorer, SpacePilot…):
# Logitech's other products (mice, keyboards) share the vendor id
LOGITECH_SPACE_PRODUCTS = frozenset(
    {0xC603, 0xC605, 0xC606, 0xC621, 0xC623, 0xC625, 0xC626, 0xC627, 0xC628, 0xC629, 0xC62B}
)
REPORT_SIZE = 64  # the largest report any SpaceMouse sends is 13 bytes


class SpaceMouseNotFound(ConnectionError):
    """No SpaceMouse is connected (or its hidraw node is not readable)."""


@dataclass(frozen=True)
class HidDeviceInfo:
    path: bytes
    vendor_id: int
    product_id: int
    product: str


def _is_spacemouse(vendor_id: int, product_id: int) -> bool:
    if vendor_id == VENDOR_3DCONNEXION:
        return True
    return vendor_id == VENDOR_LOGITECH and product_id in LOGITECH_SPACE_PRODUCTS


def find_spacemice(devices: Iterable[dict] | None = None) -> list[HidDeviceInfo]:
    """SpaceMice among the HID devices hidapi enumerates."""
    found = []
    for d in hid.enumerate() if devices is None else devices:
        if _is_spacemouse(int(d["vendor_id"]), int(d["product_id"])):
            found.append(
                HidDeviceInfo(
                    path=d["path"],
                    vendor_id=int(d["vendor_id"]),
                    product_id=int(d["product_id"]),
                    product=str(d.get("product_string") or "SpaceMouse"),
                )
            )
    return found


class SpaceMouseHid:
    """An open SpaceMouse: ``read(timeout_ms)`` returns one raw report
    (report id first), or ``b""`` when none arrived in time."""

    def __init__(self, path: bytes | None = None) -> None:
        if path is None:
            found = find_spacemice()
            if not found:
                everything = [
                    f"{d['vendor_id']:04x}:{d['product_id']:04x}" for d in hid.enumerate()
                ]
                raise SpaceMouseNotFound(
                    "no SpaceMouse found among the HID devices "
                    f"({', '.join(everything) or 'none'}); plugged in? is /dev/hidraw* readable?"
                    " (use --device keyboard to drive from the terminal)"
                )
            path = found[0].path
        self._device = hid.device()
        try:
            self._device.open_path(path)
        except OSError as exc:
            raise SpaceMouseNotFound(f"cannot open SpaceMouse {path!r}: {exc}") from exc

    def read(self, timeout_ms: int) -> bytes:
        return bytes(self._device.read(REPORT_SIZE, timeout_ms))

    def close(self) -> None:
        self._device.close()
