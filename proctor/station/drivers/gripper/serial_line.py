"""The USB-serial adapter's latency timer, read from sysfs.

An FTDI adapter (``ftdi_sio``) holds received bytes until its buffer fills or
its latency timer expires: 16 ms by default, so every Modbus answer arrives
up to 16 ms late. The kernel driver exposes the timer as the port device's
``latency_timer`` attribute (``DEVICE_ATTR_RW(latency_timer)`` in
``drivers/usb/serial/ftdi_sio.c``), i.e.
``/sys/bus/usb-serial/devices/ttyUSB0/latency_timer``;
``deploy/udev/99-proctor-robotiq.rules`` sets it to 1 ms whenever the adapter
appears. A pty (the twin)
or a TCP gateway has no such timer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

USB_SERIAL_DEVICES = Path("/sys/bus/usb-serial/devices")


@dataclass(frozen=True)
class LatencyTimer:
    tty: str  # the kernel's name for the line, e.g. ttyUSB0
    ms: int | None  # None: the line is not a USB-serial adapter with a timer
    why_none: str = ""


def latency_timer(port: str, sysfs: Path | None = None) -> LatencyTimer:
    """The latency timer of the adapter behind ``port`` (a ``/dev/serial/by-id``
    link is followed to its ``ttyUSBn``)."""
    sysfs = sysfs or USB_SERIAL_DEVICES
    if port.startswith("tcp://"):
        return LatencyTimer(port, None, "a TCP gateway, not a USB-serial adapter")
    tty = Path(port).resolve().name
    attr = sysfs / tty / "latency_timer"
    if not (sysfs / tty).exists():
        return LatencyTimer(tty, None, f"{tty} is not a USB-serial device (a pty?)")
    if not attr.exists():
        return LatencyTimer(tty, None, f"{tty}'s driver has no latency timer (not FTDI?)")
    return LatencyTimer(tty, int(attr.read_text().strip()))
