"""The ``Arm`` role: state in, commands out.

Conventions (shared by every implementation, the simulated cell included):
joint vectors have 7 entries (radians, rad/s); an end-effector pose is
``[x, y, z, qx, qy, qz, qw]`` in metres in the robot base frame, quaternion
scalar-last; a Cartesian velocity twist is ``[vx, vy, vz, wx, wy, wz]``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from types import TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar

import numpy as np

# the command vocabulary is the kernel's (the recording carries it): named here too
from proctor.core.arm_commands import N_JOINTS as N_JOINTS
from proctor.core.arm_commands import TARGET_SIZE as TARGET_SIZE
from proctor.core.arm_commands import ArmCommandKind as ArmCommandKind
from proctor.core.clock import Clock
from proctor.core.errors import ConfigError
from proctor.core.registry import Registry
from proctor.station.drivers.arm.faults import NO_FLAG_CAUSES, FlagCauses
from proctor.station.drivers.checks import CheckResult, CheckStatus, PreflightMotionSettings


@dataclass(frozen=True)
class ArmCommand:
    kind: ArmCommandKind
    target: np.ndarray
    # the tool speed (m/s) the arm must not exceed while executing this command:
    # the station's envelope sets its cap here (``proctor.station.envelope``); None: the
    # arm's own limits only (homing, halts). A command that carries it is a
    # GUARDED one: the driver must send it as it is or refuse it (``Arm.send``)
    max_tool_speed: float | None = None
    # the same for the tool's rotation (rad/s), set by the envelope alongside
    max_tool_rotation_speed: float | None = None

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


class RobotMode(StrEnum):
    """The robot's own operating mode, as its controller reports it (libfranka's
    ``franka::RobotMode``, bound by franky as ``franky.RobotMode`` with the
    members Other, Idle, Move, Guiding, Reflex, UserStopped and
    AutomaticErrorRecovery: franky ``python/bind_enums.cpp``). The console shows
    it, so that an engaged user stop or a hand-guided arm is seen as such."""

    idle = "idle"  # ready for commands, nothing moving
    move = "move"  # executing a motion
    guiding = "guiding"  # someone is hand-guiding the arm
    reflex = "reflex"  # stopped by a reflex: needs an operator's recover
    user_stopped = "user_stopped"  # the external enabling / user-stop device is engaged
    automatic_error_recovery = "automatic_error_recovery"
    other = "other"  # brakes locked, FCI off, or anything else the controller says


class ArmErrorKind(StrEnum):
    """What kind of error the arm reports: the control loop attributes a
    fault to its cause from this and the controller's flags
    (``proctor.station.control.attribution``, with the arm's own
    ``Arm.fault_flag_causes``)."""

    reflex = "reflex"  # the controller aborted the motion; its flags say why
    communication = "communication"  # the link to the controller failed
    control = "control"  # the controller or the client library refused a command
    user_stop = "user_stop"  # the hardware user stop (enabling device, E-stop) was pressed


@dataclass(frozen=True)
class ArmState:
    t: float  # station clock time of the sample
    q: np.ndarray  # (7,) joint positions, rad
    dq: np.ndarray  # (7,) joint velocities, rad/s
    ee_pose: np.ndarray  # (7,) [x, y, z, qx, qy, qz, qw]
    # the controller's error text (reflex, communication…); None when healthy
    error: str | None = None
    # the robot's own mode (see RobotMode); None where a driver cannot tell
    mode: RobotMode | None = None
    # its kind, and the controller's error flags behind it (the franky driver and the
    # simulated cell: libfranka's, ``proctor.station.drivers.arm.flags``)
    error_kind: ArmErrorKind | None = None
    error_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class ArmLimits:
    """The limits a driver itself holds a command to (its ``clip``), so that the
    envelope can hold the command to them first and check exactly what will
    be sent (``proctor.station.envelope``): a guarded command the driver would
    change is refused, never altered unchecked."""

    q_min: np.ndarray  # (7,) joint targets are clipped into these (rad)
    q_max: np.ndarray
    # (7,) joint velocities the arm executes (rad/s): a faster vector is
    # scaled down uniformly, all joints alike, so it keeps its direction
    dq_max: np.ndarray
    # (7,) the joint deceleration a velocity command brakes with (rad/s²):
    # the envelope's wall before the joint limits
    ddq_max: np.ndarray
    # (7,) the arm's rated joint velocities (datasheet, rad/s): a policy's row
    # beyond a multiple of these is not a velocity but a protocol fault
    dq_rated: np.ndarray
    # a Cartesian velocity is clipped to these norms (m/s, rad/s)
    max_linear_velocity: float
    max_angular_velocity: float
    # a Cartesian pose target's position is clipped into this box (base frame, m)
    workspace_min: np.ndarray
    workspace_max: np.ndarray


@dataclass(frozen=True)
class ArmKinematics:
    """The arm's model at one joint configuration, for the envelope: the tool
    pose, the points of the arm's body that must stay above the table (the
    elbow and wrist origins, base frame), and the Jacobians that turn a joint
    velocity into their velocities (base frame, the model's own: franky's
    ``Model.zero_jacobian`` on the real arm and the twin)."""

    tool: np.ndarray  # (4, 4) the reported end effector (O_T_EE)
    body: np.ndarray  # (k, 3) elbow (joint 4) and wrist (joint 6) frame origins
    jacobian: np.ndarray  # (6, 7) the tool's: rows vx, vy, vz, wx, wy, wz
    body_jacobians: np.ndarray  # (k, 3, 7) the body points' linear ones


@dataclass(frozen=True)
class ArmConfig:
    """Base of each implementation's config; ``driver`` names the registry entry."""

    driver: ClassVar[str]
    # a neutral pose above the bins, reached between episodes (when the operator homes)
    home_q: tuple[float, ...] = (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785)
    # the arm counts as at home within this joint error (rad); arming a run needs it
    home_tolerance_rad: float = 0.03
    # FR3 joint limits (Franka datasheet), rad
    q_min: tuple[float, ...] = (-2.74, -1.78, -2.90, -3.04, -2.81, 0.54, -3.02)
    q_max: tuple[float, ...] = (2.74, 1.78, 2.90, -0.15, 2.81, 4.52, 3.02)
    extra: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class ControllerReport:
    """What pre-flight asks of an arm's controller, from its own state."""

    # the controller's mode by libfranka's names: Idle, Move, Guiding, Reflex,
    # UserStopped, AutomaticErrorRecovery, Other
    mode: str
    # fraction of the last 100 control commands the controller received
    # (libfranka: 0 while no control loop runs)
    command_success_rate: float
    # the robot's TCP / payload against the configured (commissioned) values:
    # None = as configured, else what differs; "not configured" when the
    # config names none
    tcp_problem: str | None
    payload_problem: str | None
    tcp_configured: bool
    payload_configured: bool
    # library and server versions, by name, as far as the driver can tell
    versions: dict[str, str] = field(default_factory=dict)


class ArmFault(RuntimeError):
    """The arm refused or aborted a motion (reflex, limits, lost link); the
    kind and libfranka's flags come along when the driver knows them."""

    def __init__(
        self, message: str, kind: ArmErrorKind | None = None, flags: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.flags = flags


class ArmHalted(ArmFault):
    """The arm is halted by a stop: no motion starts until ``resume()``."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"arm halted by a stop, refusing to {what}: "
            "an operator must start a run or recover the arm first"
        )


# each implementation narrows ``config`` to its own config class, so that its
# fields type-check where the implementation reads them
C = TypeVar("C", bound=ArmConfig)


class Arm(ABC, Generic[C]):
    """Lifecycle: ``connect`` → (``read_state`` / ``send``)* → ``disconnect``;
    usable as a context manager, which stops the arm on the way out.

    The halt latch: ``stop()`` sets ``halted`` (inside the driver's own lock,
    before it waits for the motion to end), and while it is set ``send()`` and
    ``home()`` raise ``ArmHalted`` instead of starting a motion. Only an
    explicit ``resume()`` clears it (the runner calls it when the operator
    starts a run or recovers the arm). So a command that was already waiting
    for the driver's lock when the stop came can never move the arm after it."""

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
        """Stop motion now and set the halt latch. Must not raise on an
        already-stopped arm."""

    @property
    @abstractmethod
    def halted(self) -> bool:
        """Whether a stop has latched the arm (``send``/``home`` refuse)."""

    @abstractmethod
    def resume(self) -> None:
        """Clear the halt latch. Only on an explicit operator action."""

    def tool_transform(self, q: np.ndarray) -> np.ndarray | None:
        """Forward kinematics: the 4×4 pose (base frame) of the tool point that
        ``read_state().ee_pose`` reports, for joint positions ``q``; None when
        this arm has no kinematic model (the envelope then refuses joint-space
        commands, which it could not predict)."""
        return None

    def kinematics(self, q: np.ndarray) -> ArmKinematics | None:
        """The tool, the elbow and wrist points and their Jacobians at ``q``;
        None when this arm has no kinematic model (the envelope then refuses
        joint-space commands)."""
        return None

    def limits(self) -> ArmLimits | None:
        """The limits ``send`` clips a command to; None: an arm that clips
        nothing (the envelope's own limits apply alone)."""
        return None

    @abstractmethod
    def recover(self) -> None:
        """Clear a controller error. Only ever on an explicit operator action."""

    @abstractmethod
    def home(self) -> None:
        """Move to ``config.home_q`` and wait until there: first straight up to a
        clearance height, then across, then the joints. Only ever on an
        explicit operator action (the cell confirmed clear)."""

    def at_home(self, state: ArmState | None = None) -> bool:
        """Whether the arm stands at ``config.home_q`` (within ``home_tolerance_rad``),
        judged on ``state`` or on a fresh reading."""
        q = (state or self.read_state()).q
        error = float(np.max(np.abs(q - np.asarray(self.config.home_q))))
        return error <= self.config.home_tolerance_rad

    def controller_report(self) -> ControllerReport | None:
        """The controller's own view for pre-flight (mode, end effector,
        command success rate, versions); None for an arm without one (the
        simulated cell)."""
        return None

    def fault_flag_causes(self) -> FlagCauses:
        """What each of the controller's error flags (``ArmState.error_flags``,
        ``ArmFault.flags``) says about whose doing a fault is, for the control
        loop's attribution (``proctor.station.control.attribution``). Only the
        driver knows its controller's flags; none by default, and the faults
        of an arm without flags go by their kind alone."""
        return NO_FLAG_CAUSES

    def preflight_checks(
        self, clock: Clock, settings: PreflightMotionSettings, *, daemon_start: bool = False
    ) -> Iterator[CheckResult]:
        """The checks only this arm's driver knows how to make, each as soon as it
        is done, for ``proctor station check`` (``proctor.station.preflight``
        runs them after the arm's and the versions' lines). ``daemon_start``:
        before the daemon starts, with nobody watching the arm, so nothing may
        move. None by default."""
        return iter(())

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


def ask_controller(arm: Arm[Any], name: str) -> tuple[ControllerReport | None, CheckResult | None]:
    """The controller's report for the check ``name``, or the failed result
    that says why there is none."""
    try:
        report = arm.controller_report() if arm.is_connected else None
    except ArmFault as exc:
        return None, CheckResult(name, CheckStatus.failed, str(exc))
    if report is None:
        why = "arm not connected" if not arm.is_connected else "this arm has no controller"
        return None, CheckResult(name, CheckStatus.failed, f"cannot ask the controller ({why})")
    return report, None


ARMS: Registry[type[Arm]] = Registry(
    "arm driver",
    {
        "sim": "proctor.station.sim.arm",
        "franky": "proctor.station.drivers.arm.franky",
    },
    error=ConfigError,
)
