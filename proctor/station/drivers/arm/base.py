"""The ``Arm`` role: state in, commands out.

Conventions (shared by every implementation, the simulated cell included):
joint vectors have 7 entries (radians, rad/s); an end-effector pose is
``[x, y, z, qx, qy, qz, qw]`` in metres in the robot base frame, quaternion
scalar-last; a Cartesian velocity twist is ``[vx, vy, vz, wx, wy, wz]``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from types import TracebackType
from typing import ClassVar, Generic, Self, TypeVar

import numpy as np

from proctor.station.drivers.registry import Registry

N_JOINTS = 7


class ArmCommandKind(StrEnum):
    joint_position = "joint_position"
    joint_velocity = "joint_velocity"
    cartesian_pose = "cartesian_pose"
    cartesian_velocity = "cartesian_velocity"


TARGET_SIZE = {
    ArmCommandKind.joint_position: N_JOINTS,
    ArmCommandKind.joint_velocity: N_JOINTS,
    ArmCommandKind.cartesian_pose: 7,
    ArmCommandKind.cartesian_velocity: 6,
}


@dataclass(frozen=True)
class ArmCommand:
    kind: ArmCommandKind
    target: np.ndarray
    # the tool speed (m/s) the arm must not exceed while executing this command:
    # the station's envelope sets its cap here (``proctor.station.envelope``); None: the
    # arm's own limits only (homing, halts)
    max_tool_speed: float | None = None

    def __post_init__(self) -> None:
        target = np.asarray(self.target, dtype=np.float64)
        if target.shape != (TARGET_SIZE[self.kind],):
            raise ValueError(
                f"{self.kind} command needs {TARGET_SIZE[self.kind]} values, "
                f"got shape {target.shape}"
            )
        if not np.all(np.isfinite(target)):
            raise ValueError(f"{self.kind} command has non-finite values")
        object.__setattr__(self, "target", target)


@dataclass(frozen=True)
class ArmState:
    t: float  # station clock time of the sample
    q: np.ndarray  # (7,) joint positions, rad
    dq: np.ndarray  # (7,) joint velocities, rad/s
    ee_pose: np.ndarray  # (7,) [x, y, z, qx, qy, qz, qw]
    # the controller's error text (reflex, communication…); None when healthy
    error: str | None = None


@dataclass(frozen=True)
class ArmConfig:
    """Base of each implementation's config; ``driver`` names the registry entry."""

    driver: ClassVar[str]
    # a neutral pose above the bins, reached between episodes
    home_q: tuple[float, ...] = (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785)
    # FR3 joint limits (Franka datasheet), rad
    q_min: tuple[float, ...] = (-2.74, -1.78, -2.90, -3.04, -2.81, 0.54, -3.02)
    q_max: tuple[float, ...] = (2.74, 1.78, 2.90, -0.15, 2.81, 4.52, 3.02)
    extra: dict[str, object] = field(default_factory=dict)


class ArmFault(RuntimeError):
    """The arm refused or aborted a motion (reflex, limits, lost link)."""


# each implementation narrows ``config`` to its own config class, so that its
# fields type-check where the implementation reads them
C = TypeVar("C", bound=ArmConfig)


class Arm(ABC, Generic[C]):
    """Lifecycle: ``connect`` → (``read_state`` / ``send``)* → ``disconnect``;
    usable as a context manager, which stops the arm on the way out."""

    config: C

    @abstractmethod
    def connect(self) -> None: ...

    @abstractmethod
    def disconnect(self) -> None: ...

    @property
    @abstractmethod
    def is_connected(self) -> bool: ...

    @abstractmethod
    def read_state(self) -> ArmState: ...

    @abstractmethod
    def send(self, command: ArmCommand) -> ArmCommand:
        """Start executing ``command``, preempting the one in progress; return
        the command actually sent (after clipping to limits) so that both the
        requested and the sent command can be recorded."""

    @abstractmethod
    def stop(self) -> None:
        """Stop motion now. Must not raise on an already-stopped arm."""

    def tool_transform(self, q: np.ndarray) -> np.ndarray | None:
        """Forward kinematics: the 4×4 pose (base frame) of the tool point that
        ``read_state().ee_pose`` reports, for joint positions ``q``; None when
        this arm has no kinematic model (the envelope then refuses joint-space
        commands, which it could not predict)."""
        return None

    @abstractmethod
    def recover(self) -> None:
        """Clear a controller error. Only ever on an explicit operator action."""

    @abstractmethod
    def home(self) -> None:
        """Move to ``config.home_q`` and wait until there."""

    def __enter__(self) -> Self:
        self.connect()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import logging

        try:
            self.stop()
        except Exception:
            logging.getLogger(__name__).critical("FAILED TO STOP THE ARM", exc_info=True)
            raise
        finally:
            self.disconnect()


ARMS: Registry[Arm] = Registry(
    "arm",
    {
        "sim": "proctor.station.sim.arm",
        "franky": "proctor.station.drivers.arm.franky",
    },
)
