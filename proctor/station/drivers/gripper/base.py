"""The ``Gripper`` role. Positions are normalised: 0 = fully open, 1 = fully
closed (the DROID/openpi convention); speed and force are fractions of the
device's range."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType
from typing import ClassVar, Generic, Self, TypeVar

from proctor.core.errors import ConfigError
from proctor.core.registry import Registry


@dataclass(frozen=True)
class GripperCommand:
    position: float  # target in [0, 1]
    speed: float = 1.0  # [0, 1]
    force: float = 0.5  # [0, 1]

    def __post_init__(self) -> None:
        for name in ("position", "speed", "force"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"gripper {name} must be in [0, 1], got {value}")


@dataclass(frozen=True)
class GripperState:
    t: float  # station clock time of the sample
    target: float  # last commanded position, [0, 1]
    position: float  # measured position, [0, 1]
    object_detected: bool  # fingers stopped on an object
    activated: bool
    fault: str | None = None  # device fault text; None when healthy
    current_ma: float | None = None


@dataclass(frozen=True)
class GripperConfig:
    driver: ClassVar[str]


class GripperFault(RuntimeError):
    """The gripper reported a fault or stopped answering."""


class GripperHalted(GripperFault):
    """A command refused because a safety stop halted the gripper (until
    ``resume``, an operator's action)."""


# each implementation narrows ``config`` to its own config class, so that its
# fields type-check where the implementation reads them
C = TypeVar("C", bound=GripperConfig)


class Gripper(ABC, Generic[C]):
    config: C

    @abstractmethod
    def connect(self) -> None: ...

    @abstractmethod
    def disconnect(self) -> None: ...

    @property
    @abstractmethod
    def is_connected(self) -> bool: ...

    @abstractmethod
    def activate(self) -> None:
        """Reset and activate; return once the device reports it is ready.
        On a real gripper this moves the fingers: an operator's action."""

    def needs_activation(self) -> bool:
        """Whether the device must be (re)activated before it can move."""
        return not self.read_state().activated

    def ensure_activated(self) -> bool:
        """Activate only a gripper that needs it (never one that is ready, which
        may be holding something); True when it did activate."""
        if not self.needs_activation():
            return False
        self.activate()
        return True

    @abstractmethod
    def send(self, command: GripperCommand) -> GripperCommand:
        """Start moving; return the command actually sent (after quantisation).
        Raises ``GripperHalted`` between ``halt`` and ``resume``."""

    @abstractmethod
    def halt(self) -> None:
        """A safety stop's: the fingers stop where they are now (they keep what
        they hold), a command not yet delivered is dropped, and every ``send``
        is refused until ``resume``. Never waits long: called on the stop's path."""

    @abstractmethod
    def resume(self) -> None:
        """Take commands again (an operator's start, homing or recovery)."""

    @property
    @abstractmethod
    def halted(self) -> bool: ...

    @abstractmethod
    def read_state(self) -> GripperState: ...

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


GRIPPERS: Registry[type[Gripper]] = Registry(
    "gripper driver",
    {
        "sim": "proctor.station.sim.gripper",
        "robotiq_2f85": "proctor.station.drivers.gripper.robotiq",
    },
    error=ConfigError,
)
