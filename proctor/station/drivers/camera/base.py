"""The ``Camera`` role: frames with the station-clock time they were captured."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar

import numpy as np

from proctor.core.errors import ConfigError
from proctor.core.registry import Registry


@dataclass(frozen=True)
class Frame:
    t: float  # station clock time of capture (device time mapped onto it)
    index: int  # the camera's frame counter; gaps mean dropped frames
    image: np.ndarray  # (H, W, 3) uint8, RGB
    device_t: float | None = None  # the device's own timestamp, seconds, if any


@dataclass(frozen=True)
class CameraConfig:
    driver: ClassVar[str]
    name: str = "exterior"  # "exterior" | "wrist"
    width: int = 640
    height: int = 480
    fps: int = 30


class CameraStalled(RuntimeError):
    """No frame for longer than the camera's stall timeout."""


# each implementation narrows ``config`` to its own config class, so that its
# fields type-check where the implementation reads them
C = TypeVar("C", bound=CameraConfig)


class Camera(ABC, Generic[C]):
    config: C

    @abstractmethod
    def connect(self) -> None: ...

    @abstractmethod
    def disconnect(self) -> None: ...

    @property
    @abstractmethod
    def is_connected(self) -> bool: ...

    @abstractmethod
    def read(self, timeout_s: float = 1.0) -> Frame:
        """The next frame; raises ``CameraStalled`` if none arrives in time."""

    def describe(self) -> dict[str, Any]:
        """The device's settings in force (exposure, white balance, timestamp
        domain, USB link…), as the episode's manifest records them."""
        return {}

    def __enter__(self) -> Self:
        self.connect()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.disconnect()


CAMERAS: Registry[type[Camera]] = Registry(
    "camera driver",
    {
        "sim": "proctor.station.sim.camera",
        "realsense": "proctor.station.drivers.camera.realsense",
        "uvc": "proctor.station.drivers.camera.uvc",
    },
    error=ConfigError,
)
