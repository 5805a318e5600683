"""One holder of a station's devices at a time.

The daemon holds the arm's FCI connection, the gripper's RS-485 line and the
cameras for as long as it runs. A second program opening them — `proctor
station check` after a camera replug, say — becomes a second Modbus master
on the gripper's line (pyserial does not open a port exclusively), so frames
collide, the daemon's gripper goes stale and its episode ends in a gripper
fault (hardware review #11). So the daemon takes an exclusive lock on a file
in the station's spool folder, and every other command that opens the
devices refuses while it is held, naming the holder.

``flock`` locks belong to the open file: the kernel releases them when the
process exits, however it exits (kill -9 included), so a crash never leaves
the station locked.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from proctor.core.errors import UsageError
from proctor.core.settings import Settings
from proctor.station.cell import HARDWARE_PROFILES
from proctor.station.config import StationConfig, spool_root

LOCK_NAME = "devices.lock"

__all__ = ["HARDWARE_PROFILES", "DeviceLock", "DevicesBusy", "station_devices"]


class DevicesBusy(UsageError):
    """Another process holds the station's devices."""


class DeviceLock:
    """The exclusive hold on a station's devices (see the module's rules)."""

    def __init__(self, folder: Path, holder: str) -> None:
        self.path = folder / LOCK_NAME
        self.holder = holder
        self._fd: int | None = None

    def acquire(self) -> DeviceLock:
        """Take the lock now, or raise ``DevicesBusy`` naming who holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise DevicesBusy(
                f"the station's devices are held by {who}: stop it first "
                "(`systemctl stop proctor-station`), then run this again"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{self.holder} (pid {os.getpid()})".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file releases the flock
            self._fd = None

    def __enter__(self) -> DeviceLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def station_devices(settings: Settings, config: StationConfig, holder: str) -> DeviceLock:
    """The lock of the station ``config`` describes (in its spool folder:
    each station on a host has its own), not yet taken."""
    return DeviceLock(spool_root(settings, config.name, config), holder)
