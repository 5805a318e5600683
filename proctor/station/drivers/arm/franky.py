"""Franka FR3 through franky-control (which bundles libfranka).

Each station command becomes an asynchronous franky motion; a newer command
preempts the one in progress (franky motion objects are single-use, so every
command builds a fresh one). A position target is held ``position_hold_s``
once reached, so that a stream of them at the policy's rate runs in one
libfranka control loop (``_position_motion``). State is read straight from
libfranka's latest 1 kHz sample, fast enough for ≥ 100 Hz telemetry.

Faults: an exception out of a motion (a reflex, a lost link) latches the
arm as faulted, with libfranka's text, its kind and libfranka's error flags;
``read_state`` reports them in ``ArmState`` and ``send`` refuses to move
until an operator calls ``recover``. Nothing here recovers on its own.

Stops: ``stop()`` sets the halt latch under the driver's lock before it stops
the motion, and ``send``/``home`` check it under the same lock, so a command
that was waiting for the lock while the stop ran cannot start a motion after
it; only ``resume()`` (an operator's start or recover) clears it.

Homing goes as on the simulated cell (``proctor.station.sim.arm``): straight up to
``home_clearance_z_m``, a check that the tool got there, across to the home
pose (computed with franky's model: ``Model.pose(Frame.EndEffector, q, F_T_EE,
EE_T_K)``; in stages, none turning the wrist more than a quarter turn, joint 7
checked first), then the joints to ``home_q`` (their joint-space line checked
first to keep the tool above the clearance: ``homing``), each move slow and
ended by a stop.

Which exceptions franky raises (franky 2.0.0, ``python/bind_errors.cpp``):
libfranka's (``ControlException``, ``CommandException``, ``NetworkException``…,
and ``ModelException``) are registered under the ``franky.Exception`` base;
franky's own (``InvalidMotionTypeException``, ``MotionReuseException``,
``ReactionRecursionException``, ``TorqueSignalTimeoutException``) directly
under Python's ``Exception``; and any other ``std::runtime_error`` (e.g. the
waypoint checks of ``src/motion/joint_velocity_waypoint_motion.cpp``) reaches
Python as a plain ``RuntimeError``, pybind11's default translation. All of
them are faults here (``FRANKY_ERRORS``). An exception out of an asynchronous
motion is stored by franky and rethrown once, by the next ``poll_motion`` or
``join_motion``, which clears it (``joinMotionUnsafe`` in
``include/franky/robot.hpp``): so the one call that sees it must latch it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, ClassVar

import franky
import numpy as np

from proctor.core.clock import Clock, MonotonicClock
from proctor.station.drivers.arm.base import (
    ARMS,
    N_JOINTS,
    Arm,
    ArmCommand,
    ArmCommandKind,
    ArmConfig,
    ArmErrorKind,
    ArmFault,
    ArmHalted,
    ArmKinematics,
    ArmLimits,
    ArmState,
    ControllerReport,
    RobotMode,
)
from proctor.station.drivers.arm.faults import FlagCauses
from proctor.station.drivers.arm.flags import LIBFRANKA_ERROR_FLAGS, flags_in, unique
from proctor.station.drivers.arm.franky_checks import libfranka_checks
from proctor.station.drivers.arm.franky_faults import FLAG_CAUSES
from proctor.station.drivers.arm.homing import (
    check_joint_line,
    check_wrist_turn,
    slerp,
    wrist_stages,
)
from proctor.station.drivers.checks import CheckResult, PreflightMotionSettings

log = logging.getLogger(__name__)

# libfranka's text when a motion is cut short by ``stop()`` or replaced by a
# newer ``move``: our own doing, never a fault. Exactly this sentence: libfranka
# also says "Move command preempted due to activated safety function! Please
# disable all safety functions." when a Watchman safety rule ends the motion
# (src/robot_impl.h, Move::Status::kPreemptedDueToActivatedSafetyFunctions),
# which is a fault to latch and show, not the station's own stop (hardware
# review #13)
PREEMPTED_TEXT = "Move command preempted!"
# how many StopMoves a stop sends while a queued motion keeps starting (one is
# the rule; the race that needs a second is a few ms wide at chunk boundaries)
STOP_ATTEMPTS = 3
# the franky exceptions that mean the link to the controller is gone or garbled
COMMUNICATION_ERRORS: tuple[type[BaseException], ...] = (
    franky.NetworkException,
    franky.ProtocolException,
    franky.IncompatibleVersionException,
)
# the ones raised when the controller refuses or aborts a motion
CONTROL_ERRORS: tuple[type[BaseException], ...] = (
    franky.ControlException,
    franky.CommandException,
    franky.InvalidOperationException,
    franky.InvalidMotionTypeException,
    franky.MotionReuseException,
    franky.RealtimeException,
)
# everything a franky call can raise: the libfranka base (ModelException and
# any future subclass included), franky's own exceptions, which are not under
# that base, and plain RuntimeError, as pybind11 translates franky's other
# std::runtime_errors. ArmFault is a RuntimeError too: no call wrapped in an
# ``except FRANKY_ERRORS`` raises one, except ``home``'s wait, which lets it through
FRANKY_ERRORS: tuple[type[BaseException], ...] = (
    franky.Exception,
    franky.InvalidMotionTypeException,
    franky.MotionReuseException,
    franky.ReactionRecursionException,
    franky.TorqueSignalTimeoutException,
    RuntimeError,
)
# the body points the envelope keeps above the table: the elbow and the wrist
# (libfranka's frames of joints 4 and 6)
BODY_FRAMES = (franky.Frame.Joint4, franky.Frame.Joint6)
# libfranka's text when a motion or a stop is refused because the controller's
# reflex has already stopped the arm ("… command aborted: motion aborted by
# reflex!", ``handleCommandResponse`` in libfranka ``src/robot_impl.h``)
REFLEX_ABORT_TEXT = "aborted by reflex"
# …and when the hardware user stop (enabling device, E-stop) ended it
USER_STOP_TEXT = "User Stop pressed"

# franky binds libfranka's RobotMode as Other, Idle, Move, Guiding, Reflex,
# UserStopped, AutomaticErrorRecovery (franky python/bind_enums.cpp)
ROBOT_MODES: dict[Any, RobotMode] = {
    franky.RobotMode.Idle: RobotMode.idle,
    franky.RobotMode.Move: RobotMode.move,
    franky.RobotMode.Guiding: RobotMode.guiding,
    franky.RobotMode.Reflex: RobotMode.reflex,
    franky.RobotMode.UserStopped: RobotMode.user_stopped,
    franky.RobotMode.AutomaticErrorRecovery: RobotMode.automatic_error_recovery,
    franky.RobotMode.Other: RobotMode.other,
}


class Realtime(StrEnum):
    enforce = "enforce"  # the real robot: refuse to run without a realtime kernel
    ignore = "ignore"  # franky-sim on loopback, or a development machine


@dataclass(frozen=True)
class FrankyArmConfig(ArmConfig):
    driver: ClassVar[str] = "franky"
    # the FCI address of the controller (the shop-floor network's static IP);
    # franky-sim binds a 127.x.y.z loopback address instead
    host: str = "172.16.0.2"
    # libfranka's 1 kHz loop misses deadlines on a stock kernel and the
    # controller then aborts with communication_constraints_violation
    realtime: Realtime = Realtime.enforce
    # fraction of the FR3's velocity limits for every motion, set once on the
    # Robot: evaluation runs beside bins and people, not at full speed. It caps
    # the speed of position motions only; velocity motions are capped by the
    # clip below and by the station's envelope (``proctor.station.envelope``), whose
    # tool speed cap also lowers each position motion's own velocity factor
    relative_dynamics_factor: float = 0.2
    # the same for acceleration and jerk (None: the velocity factor). franky's
    # RelativeDynamicsFactor(velocity, acceleration, jerk) takes them apart
    # (franky 2.0 ``include/franky/relative_dynamics_factor.hpp``): a velocity
    # command reaches its velocity at this acceleration, so a low factor makes
    # velocity policies lag (review #18). Not yet tuned on hardware.
    acceleration_factor: float | None = None
    jerk_factor: float | None = None
    # homing crosses the whole workspace with no policy watching: slower still
    # (never faster than relative_dynamics_factor, which caps every motion)
    home_dynamics_factor: float = 0.1
    # … and under the envelope's tool-speed cap (m/s): the station profiles set
    # it from ``[envelope] max_tool_speed``, so homing is held to the cap every
    # policy command is (hardware review #8: 0.1 alone allowed 0.17 m/s per
    # tool axis, up to 0.29 m/s on a diagonal)
    home_max_tool_speed: float = 0.25
    # how long homing may take before it is a fault: the longest home move
    # (~3 rad on joint 1) at 10 % dynamics takes about 10 s
    home_timeout_s: float = 20.0
    # homing succeeds within this joint error: the controller's impedance
    # leaves a few mrad (franky-sim 5–15 mrad) short of the target
    home_tolerance_rad: float = 0.03
    # homing first lifts the tool (O_T_EE, robot base frame) straight up to this
    # height, so that nothing sweeps sideways through a tote wall or the items:
    # the commissioned totes' rims plus a margin (UNVERIFIED default: measure
    # the cell; franky-sim's home pose stands at z ≈ 0.49 m)
    home_clearance_z_m: float = 0.30
    # the lift counts as done this close below the clearance (m); short of it
    # (blocked, out of reach) homing stops with a fault instead of moving across
    home_lift_tolerance_m: float = 0.02
    # after the homing trajectory ends the joints still converge on the target
    # for a moment (impedance control lags the trajectory)
    settle_timeout_s: float = 1.0
    # libfranka's connect blocks while the controller serves another client
    # (Desk, a second station process); a controller that answers at all
    # answers within a second
    connect_timeout_s: float = 10.0
    # collision reflex thresholds, the libfranka examples' values: low enough
    # that brushing a bin wall trips a reflex, high enough that the arm's own
    # acceleration with a 1 kg payload does not
    collision_torque_nm: tuple[float, ...] = (20.0, 20.0, 18.0, 18.0, 16.0, 14.0, 12.0)
    collision_force_n: tuple[float, ...] = (20.0, 20.0, 20.0, 25.0, 25.0, 25.0)
    # joint targets are clipped this far inside q_min/q_max: the controller's
    # joint-limit reflex trips *at* the limit, and tracking overshoots by mrad
    joint_margin_rad: float = 0.05
    # FR3 datasheet joint velocity limits (rad/s), scaled by the dynamics factor
    max_joint_velocity: tuple[float, ...] = (2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26)
    # the joint acceleration a velocity command brakes with before the joint
    # limits (rad/s², scaled by the acceleration factor) where the connected
    # robot does not say (franky's ``Robot.joint_acceleration_limit``, read at
    # run time, wins): franky's Ruckig limits (10 rad/s² per joint, the value
    # franky-based stacks set; not verified against the FR3 controller)
    max_joint_acceleration: tuple[float, ...] = (10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0)
    # FR3 datasheet end-effector limits: 3.0 m/s translation, 2.5 rad/s rotation
    max_linear_velocity: float = 3.0
    max_angular_velocity: float = 2.5
    # a velocity command holds for this long and then ramps to zero, so a
    # policy that stops sending (crash, hang) stops the arm: three periods of
    # a 15 Hz control loop
    velocity_hold_s: float = 0.2
    # a position target, once reached, is held this long before its motion
    # ends: a policy streams targets at 15 Hz, and the next one then replaces
    # the motion inside the running control loop instead of starting a new
    # loop (review #19; see _position_motion). Three periods at 15 Hz, so one
    # late step does not end the loop; a policy that stops sending leaves the
    # arm at rest at its last target and the loop ends on its own, as a
    # motion that ended at its target did
    position_hold_s: float = 0.2
    # Cartesian targets are clipped to this box (m, robot base frame): above
    # the table top and inside the cell's fence
    workspace_min: tuple[float, float, float] = (0.15, -0.6, 0.02)
    workspace_max: tuple[float, float, float] = (0.85, 0.6, 0.9)
    # how long ``stop`` waits for the motion to wind down before it calls the
    # arm unstoppable (libfranka's stop decelerates within ~100 ms)
    stop_timeout_s: float = 1.0
    # the commissioned TCP, flange → tool centre point [x, y, z, qx, qy, qz, qw]
    # (the robot's F_T_EE), and the payload on the flange (mass kg, centre of
    # mass m in the flange frame, inertia kg·m² column-major): configured
    # through franky at connect and read back (see configure_end_effector).
    # None leaves Desk's end-effector configuration as it is.
    tcp: tuple[float, ...] | None = None
    payload_mass: float | None = None
    payload_com: tuple[float, ...] = (0.0, 0.0, 0.0)
    payload_inertia: tuple[float, ...] = (0.001, 0.0, 0.0, 0.0, 0.001, 0.0, 0.0, 0.0, 0.001)
    # how far the robot's own F_T_EE / m_total may differ from the commissioned
    # values (float32 on the wire: libfranka's state is packed as floats)
    tcp_tolerance_m: float = 0.002
    tcp_tolerance_deg: float = 1.0
    payload_tolerance_kg: float = 0.05
    payload_com_tolerance_m: float = 0.01

    def __post_init__(self) -> None:
        # configs arrive from TOML as plain strings and lists
        object.__setattr__(self, "realtime", Realtime(self.realtime))
        for name, size in (
            ("home_q", N_JOINTS),
            ("q_min", N_JOINTS),
            ("q_max", N_JOINTS),
            ("collision_torque_nm", N_JOINTS),
            ("collision_force_n", 6),
            ("max_joint_velocity", N_JOINTS),
            ("max_joint_acceleration", N_JOINTS),
            ("workspace_min", 3),
            ("workspace_max", 3),
        ):
            value = tuple(float(v) for v in getattr(self, name))
            if len(value) != size:
                raise ValueError(f"franky arm config: {name} needs {size} values, got {len(value)}")
            object.__setattr__(self, name, value)
        self._check_end_effector()
        lo, hi = np.asarray(self.workspace_min), np.asarray(self.workspace_max)
        if not np.all(lo < hi):
            raise ValueError(
                f"franky arm config: workspace_min {list(self.workspace_min)} must be below "
                f"workspace_max {list(self.workspace_max)} on every axis"
            )
        # home_q is never clipped into the limits (a clipped home is another
        # pose than the one commissioned): outside them, the config is refused
        m = self.joint_margin_rad
        for i, (v, q_lo, q_hi) in enumerate(zip(self.home_q, self.q_min, self.q_max, strict=True)):
            if not q_lo + m <= v <= q_hi - m:
                raise ValueError(
                    f"franky arm config: home_q joint {i + 1} at {v:.3f} rad is outside its "
                    f"limits [{q_lo:.3f}, {q_hi:.3f}] less the {m:g} rad margin"
                )
        if not 0.0 < self.relative_dynamics_factor <= 1.0:
            raise ValueError("franky arm config: relative_dynamics_factor must be in (0, 1]")
        if not 0.0 <= self.position_hold_s <= 5.0:
            raise ValueError("franky arm config: position_hold_s must be in [0, 5] s")
        if not 0.0 < self.home_dynamics_factor <= 1.0:
            raise ValueError("franky arm config: home_dynamics_factor must be in (0, 1]")
        if not 0.0 < self.home_max_tool_speed <= 3.0:
            raise ValueError("franky arm config: home_max_tool_speed must be in (0, 3] m/s")
        for name in ("acceleration_factor", "jerk_factor"):
            value = getattr(self, name)
            if value is not None and not 0.0 < value <= 1.0:
                raise ValueError(f"franky arm config: {name} must be in (0, 1]")

    @property
    def dynamics(self) -> tuple[float, float, float]:
        """The Robot's global (velocity, acceleration, jerk) factors."""
        v = self.relative_dynamics_factor
        return (v, self.acceleration_factor or v, self.jerk_factor or v)

    def _check_end_effector(self) -> None:
        for name, size in (("payload_com", 3), ("payload_inertia", 9)):
            value = tuple(float(v) for v in getattr(self, name))
            if len(value) != size:
                raise ValueError(f"franky arm config: {name} needs {size} values, got {len(value)}")
            object.__setattr__(self, name, value)
        if self.tcp is not None:
            tcp = tuple(float(v) for v in self.tcp)
            if len(tcp) != 7 or abs(float(np.linalg.norm(tcp[3:])) - 1.0) > 1e-3:
                raise ValueError(
                    "franky arm config: tcp needs [x, y, z, qx, qy, qz, qw] with a unit quaternion"
                )
            object.__setattr__(self, "tcp", tcp)
        if self.payload_mass is not None and not self.payload_mass > 0:
            raise ValueError("franky arm config: payload_mass must be positive (kg)")


RobotFactory = Callable[[FrankyArmConfig], Any]


def _connect_robot(config: FrankyArmConfig) -> franky.Robot:
    realtime = (
        franky.RealtimeConfig.Enforce
        if config.realtime == Realtime.enforce
        else franky.RealtimeConfig.Ignore
    )
    robot = franky.Robot(
        config.host,
        relative_dynamics_factor=franky.RelativeDynamicsFactor(*config.dynamics),
        realtime_config=realtime,
    )
    robot.set_collision_behavior(list(config.collision_torque_nm), list(config.collision_force_n))
    configure_end_effector(robot, config)
    return robot


def _pose(affine: Any) -> np.ndarray:
    """franky's state gives libfranka's transforms as ``franky.Affine``."""
    return np.asarray(affine.matrix, dtype=np.float64).reshape(4, 4)


def configure_end_effector(robot: Any, config: FrankyArmConfig) -> None:
    """Set the commissioned TCP and payload through franky, then read them
    back from the robot's own state; a mismatch is an ArmFault.

    franky 2.0 (the installed wheel's ``Robot.set_ee``/``set_load``
    docstrings) binds libfranka's ``setEE`` as ``Robot.set_ee(NE_T_EE)``:
    the transform from the *nominal* end effector to the end effector; the
    flange → nominal end effector ``F_T_NE`` "can only be set through the
    administrator's interface" (FCI docs, frankaemika.github.io/docs/libfranka.html),
    so ``F_T_EE = F_T_NE · NE_T_EE``; and
    ``setLoad`` as ``Robot.set_load(mass, F_x_Cload, inertia)``: an *external*
    load on top of Desk's end effector (``m_ee``, ``F_x_Cee``), the controller
    reporting their sum as ``m_total`` and ``F_x_Ctotal``. The end effector's
    own parameters can only be set in Desk (libfranka's note on setLoad), so
    the commissioned payload is split: load = commissioned − Desk's end
    effector, placed so that the combined centre of mass is the commissioned
    one. The inertia is passed as measured (it is not composed with Desk's:
    at the station's speeds the gravity term dominates; not verified on
    hardware)."""
    if config.tcp is None and config.payload_mass is None:
        return
    s = robot.state
    if config.tcp is not None:
        wanted = _tcp_matrix(config.tcp)
        ne_t_ee = np.linalg.inv(_pose(s.F_T_NE)) @ wanted
        robot.set_ee(list(ne_t_ee.flatten(order="F")))
    if config.payload_mass is not None:
        m_ee = float(s.m_ee)
        m_load = config.payload_mass - m_ee
        if m_load < -config.payload_tolerance_kg:
            raise ArmFault(
                f"the end effector configured in Desk weighs {m_ee:.3f} kg, more than the "
                f"commissioned payload {config.payload_mass:.3f} kg: fix Desk's end-effector "
                "configuration or commission again"
            )
        m_load = max(0.0, m_load)
        com = np.asarray(config.payload_com)
        c_load = (
            (config.payload_mass * com - m_ee * np.asarray(s.F_x_Cee)) / m_load
            if m_load > 1e-3
            else np.zeros(3)
        )
        robot.set_load(m_load, list(c_load), list(config.payload_inertia))
    # the next state sample carries the new values, not necessarily the one
    # franky holds now: read back until they match or the time is up
    deadline = threading.Event()
    for _ in range(READBACK_TRIES):
        problems = end_effector_mismatch(end_effector_report(robot.state), config)
        if not problems:
            return
        deadline.wait(READBACK_PERIOD_S)
    raise ArmFault("end effector not as configured after setting it: " + "; ".join(problems))


def fresh_state(robot: Any) -> Any:
    """A state the controller sent after this call began, not one that was
    already waiting. libfranka's ``readOnce`` returns the newest state on its
    UDP socket and blocks only when none is newer than the last one returned
    (libfranka src/robot_impl.cpp, ``Robot::Impl::receiveRobotState``); franky
    2.0's ``Robot.state`` reads a second time only when the robot's clock
    advanced over 3 ms less than the host's since the previous read (franky
    v2.0.0 src/robot.cpp, ``robotStateIsStale``). So a state read within
    milliseconds of a ``set_load``/``set_ee`` can be one sent before the
    controller applied the change (franky-sim replies to the command before it
    sends the next state; that the real controller can do the same is not
    verified on hardware). The first read here takes what was waiting, the
    second one that arrived after it. During a motion franky answers from the
    control loop's own latest state, which both reads return."""
    _ = robot.state  # takes what was waiting on the socket
    return robot.state


# reading back the end effector after setting it: up to half a second
READBACK_TRIES = 50
READBACK_PERIOD_S = 0.01


def _tcp_matrix(tcp: tuple[float, ...]) -> np.ndarray:
    from proctor.core.geometry import quat_to_matrix

    m = np.eye(4)
    m[:3, :3] = quat_to_matrix(np.asarray(tcp[3:]))
    m[:3, 3] = tcp[:3]
    return m


@dataclass(frozen=True)
class EndEffectorReport:
    """What the controller believes is on the flange (its own state)."""

    F_T_EE: np.ndarray  # 4×4
    m_ee: float  # Desk's end effector
    m_load: float  # set through set_load
    m_total: float
    F_x_Ctotal: np.ndarray  # (3,)


def end_effector_report(state: Any) -> EndEffectorReport:
    return EndEffectorReport(
        F_T_EE=_pose(state.F_T_EE),
        m_ee=float(state.m_ee),
        m_load=float(state.m_load),
        m_total=float(state.m_total),
        F_x_Ctotal=np.asarray(state.F_x_Ctotal, dtype=np.float64),
    )


def tcp_mismatch(report: EndEffectorReport, config: FrankyArmConfig) -> str | None:
    if config.tcp is None:
        return None
    wanted = _tcp_matrix(config.tcp)
    dx = float(np.linalg.norm(report.F_T_EE[:3, 3] - wanted[:3, 3]))
    rel = wanted[:3, :3].T @ report.F_T_EE[:3, :3]
    angle = math.degrees(math.acos(max(-1.0, min(1.0, (float(np.trace(rel)) - 1.0) / 2.0))))
    if dx <= config.tcp_tolerance_m and angle <= config.tcp_tolerance_deg:
        return None
    have = ", ".join(f"{v:.4f}" for v in report.F_T_EE[:3, 3])
    want = ", ".join(f"{v:.4f}" for v in wanted[:3, 3])
    return (
        f"TCP (F_T_EE) at [{have}] m, commissioned [{want}] m: off by {1000 * dx:.1f} mm "
        f"and {angle:.1f}°"
    )


def payload_mismatch(report: EndEffectorReport, config: FrankyArmConfig) -> str | None:
    if config.payload_mass is None:
        return None
    dm = abs(report.m_total - config.payload_mass)
    dc = float(np.linalg.norm(report.F_x_Ctotal - np.asarray(config.payload_com)))
    if dm <= config.payload_tolerance_kg and dc <= config.payload_com_tolerance_m:
        return None
    return (
        f"payload m_total {report.m_total:.3f} kg (Desk's end effector {report.m_ee:.3f} + load "
        f"{report.m_load:.3f}), commissioned {config.payload_mass:.3f} kg; centre of mass off "
        f"by {1000 * dc:.0f} mm"
    )


def end_effector_mismatch(report: EndEffectorReport, config: FrankyArmConfig) -> list[str]:
    return [p for p in (tcp_mismatch(report, config), payload_mismatch(report, config)) if p]


def _error_names(errors: Any) -> str | None:
    """libfranka's ``Errors`` print as a list of the active flags' names."""
    text = repr(errors)
    return None if text in ("[]", "") else text


def _flags(errors: Any) -> tuple[str, ...]:
    """The flags set in a libfranka ``Errors`` (one bool property each)."""
    return tuple(name for name in LIBFRANKA_ERROR_FLAGS if getattr(errors, name, False))


def _is_preemption(exc: BaseException) -> bool:
    # libfranka raises it as a CommandException (handleCommandResponse); franky
    # may hand it over from its control thread as a ControlException
    return isinstance(
        exc, (franky.ControlException, franky.CommandException)
    ) and PREEMPTED_TEXT in str(exc)


def _is_reflex_abort(exc: BaseException) -> bool:
    """A stop or command refused because a reflex already stopped the arm."""
    return REFLEX_ABORT_TEXT in str(exc)


def fault_kind(exc: BaseException) -> ArmErrorKind:
    if isinstance(exc, COMMUNICATION_ERRORS):
        return ArmErrorKind.communication
    text = str(exc)
    if USER_STOP_TEXT in text:
        return ArmErrorKind.user_stop
    # a motion the reflex aborted; not a command refused *because* the robot
    # is in Reflex mode ("… not possible in the current mode ("Reflex")"), which
    # is a refused command
    if REFLEX_ABORT_TEXT in text or (
        isinstance(exc, franky.ControlException) and "reflex" in text.lower()
    ):
        return ArmErrorKind.reflex
    return ArmErrorKind.control


def describe(exc: BaseException) -> str:
    """A fault's text: its kind and libfranka's own words."""
    kind = fault_kind(exc).value.replace("_", " ")
    return f"{kind} error ({type(exc).__name__}): {exc}"


def quaternion_normalised(q: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(q))
    if norm < 1e-6:
        raise ValueError("cartesian_pose quaternion has zero norm")
    return q / norm


@ARMS.register("franky")
class FrankyArm(Arm[FrankyArmConfig]):
    config_class: ClassVar[type[FrankyArmConfig]] = FrankyArmConfig

    def __init__(
        self,
        config: FrankyArmConfig,
        clock: Clock | None = None,
        robot_factory: RobotFactory = _connect_robot,
    ) -> None:
        self.config = config
        self.clock = clock or MonotonicClock()
        self._robot_factory = robot_factory
        self._robot: Any = None
        self._lock = threading.RLock()
        self._fault: str | None = None
        # the halt latch (see the module's docstring): set by stop(), cleared by resume()
        self._halted = False
        self._fault_kind: ArmErrorKind | None = None
        self._fault_flags: tuple[str, ...] = ()
        # the control interface of the motion last started (franky runs one
        # loop per interface; see _start_motion)
        self._interface: str | None = None
        self._q_lo = np.asarray(config.q_min) + config.joint_margin_rad
        self._q_hi = np.asarray(config.q_max) - config.joint_margin_rad
        self._dq_max = np.asarray(config.max_joint_velocity) * config.relative_dynamics_factor
        self._ddq_max: np.ndarray | None = None  # the robot's, read once connected
        # the controller's end effector (F_T_EE, EE_T_K) as last read: the model's
        # forward kinematics needs it (see tool_transform)
        self._ee_frames: tuple[Any, Any] | None = None

    # -- lifecycle ---------------------------------------------------------
    def connect(self) -> None:
        with self._lock:
            if self._robot is not None:
                return
            self._robot = self._connect_within_timeout()

    def _connect_within_timeout(self) -> Any:
        """libfranka's connect, on a helper thread so that a controller that
        never answers is a clear fault instead of a hung station."""
        c = self.config
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def attempt() -> None:
            # if this outlives the timeout, the late connection is dropped with
            # ``outcome`` once the thread ends: nobody else holds it
            try:
                outcome["robot"] = self._robot_factory(c)
            except BaseException as exc:
                outcome["error"] = exc
            done.set()

        threading.Thread(target=attempt, name="franky-connect", daemon=True).start()
        if not done.wait(c.connect_timeout_s):
            raise ArmFault(
                f"cannot connect to the arm at {c.host}: no answer within "
                f"{c.connect_timeout_s} s (FCI off, or another client holds the robot)"
            )
        error = outcome.get("error")
        if error is not None:
            if isinstance(error, FRANKY_ERRORS):
                raise ArmFault(
                    f"cannot connect to the arm at {c.host}: {describe(error)}"
                ) from None
            raise error
        return outcome.pop("robot")

    def disconnect(self) -> None:
        with self._lock:
            self._robot = None  # libfranka closes the connection with the object
            self._ee_frames = None

    @property
    def is_connected(self) -> bool:
        return self._robot is not None

    def _r(self) -> Any:
        """The robot, looked up at each use. Never bind it to a local: a
        traceback would keep the frame, and with it the libfranka connection,
        alive after ``disconnect`` — and the controller takes one client."""
        if self._robot is None:
            raise ArmFault("arm is not connected")
        return self._robot

    # -- faults ------------------------------------------------------------
    @property
    def fault(self) -> str | None:
        return self._fault

    def _latch(self, exc: BaseException) -> ArmFault:
        """Record a fault with its kind and flags, make sure nothing keeps
        moving, and say so."""
        text = describe(exc)
        kind = fault_kind(exc)
        flags = flags_in(str(exc))
        if kind == ArmErrorKind.reflex and not flags:
            # libfranka appends the flags to a reflex's text; if they are not
            # there, the controller's state still has them
            flags = self._reflex_flags()
        if self._fault is None:
            self._fault, self._fault_kind, self._fault_flags = text, kind, flags
            log.error("ARM FAULT: %s", text)
            self._safety_stop()
        return ArmFault(text, kind, flags)

    def _reflex_flags(self) -> tuple[str, ...]:
        try:
            s = self._robot.state
        except Exception:
            return ()
        return unique((*_flags(s.last_motion_errors), *_flags(s.current_errors)))

    def _safety_stop(self) -> None:
        try:
            self._robot.stop()
        except Exception as exc:
            if _is_reflex_abort(exc):
                # the controller's reflex has stopped the arm already: the stop
                # had nothing left to do (libfranka refuses it "aborted by reflex")
                _log_reflex_abort(exc)
                return
            # after a lost link nothing can reach the arm: somebody must look
            log.critical("FAILED TO STOP THE ARM after a fault", exc_info=True)

    @property
    def moving(self) -> bool:
        """Whether a motion is still executing (a fault ends it: see ``fault``)."""
        with self._lock:
            self._r()
            self._poll()
            # not poll_motion()'s return value: in franky 2.0 it is True once
            # the motion has *finished*, the opposite of its docstring
            return bool(self._r().is_in_control)

    def _poll(self) -> None:
        """Latch an exception out of the asynchronous motion, if any (the
        callers look at ``self._fault``)."""
        try:
            self._robot.poll_motion()
        except FRANKY_ERRORS as exc:
            # poll_motion hands over franky's stored exception and forgets it:
            # whatever it is, it is latched here or nowhere
            if not _is_preemption(exc):
                self._latch(exc)

    # -- the Arm role --------------------------------------------------------
    def read_state(self) -> ArmState:
        with self._lock:
            self._r()
            self._poll()  # a latched fault is reported in the state below
            try:
                s = self._robot.state
            except FRANKY_ERRORS as exc:
                raise self._latch(exc) from exc
            t = self.clock.now()
            pose = s.O_T_EE
            self._ee_frames = (s.F_T_EE, s.EE_T_K)
            error, kind, flags = self._fault, self._fault_kind, self._fault_flags
            mode = ROBOT_MODES.get(s.robot_mode, RobotMode.other)
            if error is None:
                error, kind, flags = _controller_error(s)
            return ArmState(
                t=t,
                q=np.array(s.q, dtype=np.float64),
                dq=np.array(s.dq, dtype=np.float64),
                ee_pose=np.concatenate([pose.translation, pose.quaternion]).astype(np.float64),
                error=error,
                error_kind=kind,
                error_flags=flags,
                mode=mode,
            )

    def controller_time(self) -> float:
        """Seconds on the controller's own clock: libfranka's ``RobotState.time``,
        one millisecond per state of its 1 kHz loop. Motions are generated on
        this clock, so speeds measured on it are the commanded ones even when
        the host (or franky-sim on a loaded machine) runs behind real time."""
        with self._lock:
            try:
                return float(self._r().state.time.to_sec())
            except FRANKY_ERRORS as exc:
                raise self._latch(exc) from exc

    def fault_flag_causes(self) -> FlagCauses:
        """libfranka's ``franka::Errors``, whose doing each says
        (``proctor.station.drivers.arm.franky_faults``)."""
        return FLAG_CAUSES

    def preflight_checks(
        self, clock: Clock, settings: PreflightMotionSettings, *, daemon_start: bool = False
    ) -> Iterator[CheckResult]:
        """libfranka's checks (``proctor.station.drivers.arm.franky_checks``):
        robot mode, FCI and brakes, end effector, load, the test motion."""
        return libfranka_checks(self, clock, settings, daemon_start=daemon_start)

    def controller_report(self) -> ControllerReport:
        with self._lock:
            self._r()
            try:
                s = fresh_state(self._r())
            except FRANKY_ERRORS as exc:
                raise self._latch(exc) from exc
            report = end_effector_report(s)
            return ControllerReport(
                mode=s.robot_mode.name,
                command_success_rate=float(s.control_command_success_rate),
                tcp_problem=tcp_mismatch(report, self.config),
                payload_problem=payload_mismatch(report, self.config),
                tcp_configured=self.config.tcp is not None,
                payload_configured=self.config.payload_mass is not None,
                versions=library_versions(),
            )

    def clip(self, command: ArmCommand) -> ArmCommand:
        """The command the arm will actually execute: inside the joint limits,
        the velocity limits and the workspace box, with a unit quaternion."""
        c = self.config
        target = command.target
        if command.kind == ArmCommandKind.joint_position:
            target = np.clip(target, self._q_lo, self._q_hi)
        elif command.kind == ArmCommandKind.joint_velocity:
            # all joints alike (review #1): clipping each joint on its own
            # changes the direction, and so the tool's path, that was checked
            over = float(np.max(np.abs(target) / self._dq_max))
            if over > 1.0:
                target = target / over
        elif command.kind == ArmCommandKind.cartesian_pose:
            xyz = np.clip(target[:3], c.workspace_min, c.workspace_max)
            target = np.concatenate([xyz, quaternion_normalised(target[3:])])
        else:
            factor = c.relative_dynamics_factor
            target = np.concatenate(
                [
                    _clip_norm(target[:3], c.max_linear_velocity * factor),
                    _clip_norm(target[3:], c.max_angular_velocity * factor),
                ]
            )
        return replace(command, target=target)

    def tool_transform(self, q: np.ndarray) -> np.ndarray:
        """Forward kinematics by franky's model of the arm: ``Model.pose(
        Frame.EndEffector, q, F_T_EE, EE_T_K)`` (franky 2.0
        ``python/bind_model.cpp``, ``src/model.cpp``: libfranka's model) with the
        end effector the controller is configured with — the point ``O_T_EE``
        reports (on franky-sim the two agree to 0.1 mm at the measured q)."""
        with self._lock:
            if self._ee_frames is None:
                s = self._r().state
                self._ee_frames = (s.F_T_EE, s.EE_T_K)
            frame = franky.Frame.EndEffector
            pose = self._r().model.pose(frame, np.asarray(q, dtype=np.float64), *self._ee_frames)
            return np.asarray(pose.matrix, dtype=np.float64)

    def _frames(self) -> tuple[Any, Any]:
        if self._ee_frames is None:
            s = self._r().state
            self._ee_frames = (s.F_T_EE, s.EE_T_K)
        return self._ee_frames

    def kinematics(self, q: np.ndarray) -> ArmKinematics:
        """franky's model (libfranka's) at ``q``: ``Model.pose`` and
        ``Model.zero_jacobian`` (base-frame Jacobian) of ``Frame.EndEffector``,
        ``Frame.Joint4`` (the elbow) and ``Frame.Joint6`` (the wrist), with the
        controller's end effector (the overloads taking ``q, F_T_EE, EE_T_K``:
        the installed wheel's ``_franky.pyi``; franky 2.0 ``python/bind_model.cpp``).
        That libfranka's joint frames are the Craig DH frames of the FR3 (so
        Joint4's origin is the elbow) is Franka's documented convention, the
        same as ``proctor.station.sim.kinematics``'s."""
        qq = np.asarray(q, dtype=np.float64)
        with self._lock:
            model, (f_t_ee, ee_t_k) = self._r().model, self._frames()
            tool = np.asarray(
                model.pose(franky.Frame.EndEffector, qq, f_t_ee, ee_t_k).matrix, dtype=np.float64
            )
            jac = np.asarray(
                model.zero_jacobian(franky.Frame.EndEffector, qq, f_t_ee, ee_t_k), dtype=np.float64
            )
            body, body_jac = [], []
            for frame in BODY_FRAMES:
                pose = model.pose(frame, qq, f_t_ee, ee_t_k)
                body.append(np.asarray(pose.translation, dtype=np.float64))
                j = model.zero_jacobian(frame, qq, f_t_ee, ee_t_k)
                body_jac.append(np.asarray(j, dtype=np.float64)[:3])
        return ArmKinematics(
            tool=tool, body=np.stack(body), jacobian=jac, body_jacobians=np.stack(body_jac)
        )

    def limits(self) -> ArmLimits:
        """What ``clip`` holds a command to, and the braking acceleration of a
        velocity command: franky's joint acceleration limit (read from the
        robot once; its Ruckig brakes a ``JointVelocityMotion`` at it once the
        motion's duration ends) times the Robot's acceleration factor."""
        c = self.config
        with self._lock:
            if self._ddq_max is None:
                ddq = np.asarray(c.max_joint_acceleration, dtype=np.float64)
                if self._robot is not None:
                    try:
                        got = np.asarray(self._robot.joint_acceleration_limit.get(), dtype=float)
                        if got.shape == (N_JOINTS,) and np.all(got > 0):
                            ddq = got
                    except FRANKY_ERRORS:
                        log.warning("joint acceleration limit unreadable: using the config's")
                self._ddq_max = ddq
            ddq_max = self._ddq_max * c.dynamics[1]
        factor = c.relative_dynamics_factor
        return ArmLimits(
            q_min=self._q_lo.copy(),
            q_max=self._q_hi.copy(),
            dq_max=self._dq_max.copy(),
            ddq_max=ddq_max,
            dq_rated=np.asarray(c.max_joint_velocity, dtype=np.float64),
            max_linear_velocity=c.max_linear_velocity * factor,
            max_angular_velocity=c.max_angular_velocity * factor,
            workspace_min=np.asarray(c.workspace_min, dtype=np.float64),
            workspace_max=np.asarray(c.workspace_max, dtype=np.float64),
        )

    def _velocity_factor(self, command: ArmCommand) -> float:
        """The position motion's own velocity factor that keeps the tool under
        ``command.max_tool_speed``, on top of the Robot's. A Cartesian motion's
        tool speed is bounded by franky's translation velocity limit
        (``Robot.translation_velocity_limit``, 1.7 m/s with libfranka ≥ 0.10,
        franky 2.0 ``src/robot.cpp``) on each axis that moves; a joint
        motion's by Σᵢ ‖Jᵢ‖·vᵢ (the
        model's Jacobian at the measured joints, each joint at its velocity
        limit): conservative, so joint targets may move slower than the cap."""
        cap = command.max_tool_speed
        if cap is None:
            return 1.0
        robot = self._r()
        v_global = self.config.relative_dynamics_factor
        if command.kind == ArmCommandKind.cartesian_pose:
            return min(1.0, self._cartesian_factor(command, robot, v_global))
        elif command.kind == ArmCommandKind.joint_position:
            if self._ee_frames is None:
                s = robot.state
                self._ee_frames = (s.F_T_EE, s.EE_T_K)
            jac = np.asarray(
                robot.model.zero_jacobian(
                    franky.Frame.EndEffector, np.asarray(robot.state.q), *self._ee_frames
                )
            )[:3]
            limits = np.asarray(robot.joint_velocity_limit.get(), dtype=np.float64)
            bound = float(np.linalg.norm(jac, axis=0) @ limits) * v_global
        else:
            return 1.0  # velocities: the envelope has scaled them to the cap already
        return min(1.0, cap / bound) if bound > 0 else 1.0

    @staticmethod
    def _cartesian_factor(command: ArmCommand, robot: Any, v_global: float) -> float:
        """franky's Cartesian waypoint motion limits each of its Ruckig DoFs on
        its own, in the frame of the pose the waypoint starts from:
        ``setNewWaypoint`` sets ``ref_frame_ = ref_frame_ * current_pose`` and
        the target is expressed in it (franky 2.0
        ``src/motion/cartesian_waypoint_motion.cpp``; limits per axis from
        ``getAbsoluteInputLimits``: translation, rotation, elbow). So n moving
        axes of the TOOL-frame travel reach √n × the per-axis limit, in any
        base-frame direction (review #6): the axes are counted in the measured
        tool frame (the commanded start pose differs from it by the tracking
        error only), and rotation is capped the same way."""
        cap = command.max_tool_speed
        assert cap is not None
        pose = robot.state.O_T_EE
        r0 = _quat_matrix(np.asarray(pose.quaternion, dtype=np.float64))
        travel = r0.T @ (command.target[:3] - np.asarray(pose.translation, dtype=np.float64))
        bound = float(robot.translation_velocity_limit.get()) * v_global * _axes(travel)
        factor = cap / bound if bound > 0 else 1.0
        spin_cap = command.max_tool_rotation_speed
        if spin_cap is not None:
            from proctor.core.geometry import rotation_error

            turn = r0.T @ rotation_error(_quat_matrix(command.target[3:]), r0)
            turning = _axes(turn)
            spin = float(robot.rotation_velocity_limit.get()) * v_global * turning
            if spin > 0:
                factor = min(factor, spin_cap / spin)
        return factor

    def _motion(self, command: ArmCommand) -> Any:
        # the Robot already scales every motion by its factors (given at
        # connect); a motion's own factor multiplies on top: its velocity part
        # holds a position motion to the envelope's tool speed cap
        factor = franky.RelativeDynamicsFactor(self._velocity_factor(command), 1.0, 1.0)
        t = command.target
        if command.kind in (ArmCommandKind.joint_position, ArmCommandKind.cartesian_pose):
            return self._position_motion(command.kind, t, factor)
        hold = franky.Duration(round(self.config.velocity_hold_s * 1000))
        if command.kind == ArmCommandKind.joint_velocity:
            return franky.JointVelocityMotion(t, duration=hold, relative_dynamics_factor=factor)
        return franky.CartesianVelocityMotion(
            franky.Twist(t[:3], t[3:]), duration=hold, relative_dynamics_factor=factor
        )

    def _position_motion(self, kind: ArmCommandKind, t: np.ndarray, factor: Any) -> Any:
        """A streamed position target: one waypoint, held ``position_hold_s``
        after it is reached, then the motion ends (review #19).

        What franky 2.0.0 does (tag v2.0.0, e7e63c7c; ``include/franky/motion/waypoint_motion.hpp``,
        ``WaypointMotion::nextCommandImpl``): once the last waypoint is reached
        the motion keeps commanding its target for the waypoint's
        ``hold_target_duration`` (at least 10 ms), then returns
        ``franka::MotionFinished`` when ``return_when_finished`` (the default),
        which ends libfranka's control loop; with ``return_when_finished=False``
        it holds the target for ever. A ``move`` while a loop of the same
        interface runs only swaps the motion (``Robot::moveInternal``,
        ``include/franky/robot.hpp``: ``updateMotion``), the new one starting
        from the previous command (``initWaypointMotion`` in
        ``src/motion/joint_waypoint_motion.cpp``); with no loop running it
        starts a new one: a new Move on the controller. A ``JointMotion`` or
        ``CartesianMotion`` is this motion with a hold of 0
        (``src/motion/{joint,cartesian}_motion.cpp``): a small step, reached
        within the 67 ms of a 15 Hz period, ended the loop every step.

        Why a hold, not ``return_when_finished=False``: a motion that never
        ends would keep the 1 kHz loop (and the controller in Move) running
        after the policy stops sending — at a chunk's end while it thinks, at
        the episode's end while the station awaits the operator's log — until
        something stops it, and ``moving`` (preflight's test motion, which
        waits for the controller to leave Move; the tests' settle) would never
        turn false. The hold keeps the loop alive between steps and still ends
        by itself, a deadman like ``velocity_hold_s``. The velocity factor
        (the envelope's tool-speed cap) applies to the waypoint for the whole
        motion, hold included: Ruckig's limits are set from waypoint × motion
        × Robot factors when the waypoint starts
        (``PositionWaypointMotion::setInputLimits``,
        ``include/franky/motion/position_waypoint_motion.hpp``)."""
        hold = franky.Duration(round(self.config.position_hold_s * 1000))
        if kind == ArmCommandKind.joint_position:
            return franky.JointWaypointMotion(
                [franky.JointWaypoint(t, hold_target_duration=hold)],
                relative_dynamics_factor=factor,
            )
        return franky.CartesianWaypointMotion(
            [franky.CartesianWaypoint(franky.Affine(t[:3], t[3:]), hold_target_duration=hold)],
            relative_dynamics_factor=factor,
        )

    def _ready_to_move(self, what: str) -> None:
        """Refuse to start a motion on a faulted or halted arm (under the lock)."""
        self._r()
        self._poll()
        if self._fault is not None:
            raise ArmFault(f"arm is faulted, refusing to {what}: {self._fault}")
        if self._halted:
            raise ArmHalted(what)

    def send(self, command: ArmCommand) -> ArmCommand:
        sent = self.clip(command)
        if command.max_tool_speed is not None and _changed(command, sent):
            # a guarded command is sent exactly as the envelope checked it: one
            # this clip would change was checked against other limits than the
            # arm's (a bug, or an envelope box wider than this driver's). Sending
            # the changed one unchecked is what review #1 found; refuse instead
            log.critical(
                "REFUSED a guarded %s command the driver would change: %s → %s",
                command.kind.value,
                np.array2string(command.target, precision=6),
                np.array2string(sent.target, precision=6),
            )
            raise ArmFault(
                f"refused a guarded {command.kind.value} command that the arm's own limits "
                "would change (the envelope and the driver disagree on the limits)",
                ArmErrorKind.control,
            )
        with self._lock:
            self._ready_to_move("move")
            try:
                self._start_motion(lambda: self._motion(sent), sent.kind.value)
            except FRANKY_ERRORS as exc:
                raise self._latch(exc) from exc
        return sent

    def _start_motion(self, make: Callable[[], Any], interface: str) -> None:
        """Start a motion asynchronously, preempting the running one. A motion
        preempts only one of its own control interface (joint position,
        joint velocity, Cartesian pose, Cartesian velocity); for another, the
        running motion is stopped and allowed to end first — libfranka raises
        ``InvalidMotionTypeException`` otherwise. Motions are single-use, so
        ``make`` builds a fresh one for each attempt."""
        robot = self._r()
        if self._interface not in (None, interface) and robot.is_in_control:
            self._end_motion()
        try:
            robot.move(make(), asynchronous=True)
        except franky.InvalidMotionTypeException:
            # the previous control loop was still winding down: let it end
            self._end_motion()
            self._r().move(make(), asynchronous=True)
        self._interface = interface

    def _end_motion(self) -> None:
        robot = self._r()
        try:
            robot.stop()
        except CONTROL_ERRORS:
            log.debug("stop on an idle arm", exc_info=True)
        try:
            robot.join_motion(timeout=self.config.stop_timeout_s)
        except FRANKY_ERRORS as exc:
            if not _is_preemption(exc):
                raise

    def stop(self) -> None:
        with self._lock:
            # latched first: whatever waits for this lock finds the arm halted
            self._halted = True
            if self._robot is None:
                return
            for attempt in range(1, STOP_ATTEMPTS + 1):
                self._stop_once()
                # franky's residual race (hardware review #9): a motion queued
                # just as the previous one's hold expired starts a new libfranka
                # control() after our StopMove was handled between the two, and
                # join_motion above then waited for it to end "successfully".
                # Only an arm no longer under control has really stopped.
                if not self._r().is_in_control:
                    return
                log.warning("stop: a queued motion started after the stop (attempt %d)", attempt)
            log.critical("ARM STILL UNDER CONTROL after %d stops", STOP_ATTEMPTS)
            raise ArmFault(f"arm still moving after {STOP_ATTEMPTS} stops")

    def _stop_once(self) -> None:
        """One StopMove and the wait for the motion to end (the caller holds the lock)."""
        try:
            self._r().stop()
        except COMMUNICATION_ERRORS as exc:
            raise self._latch(exc) from exc
        except CONTROL_ERRORS as exc:
            if _is_reflex_abort(exc):
                _log_reflex_abort(exc)
            else:
                log.debug("stop on an idle arm", exc_info=True)
        except FRANKY_ERRORS as exc:
            raise self._latch(exc) from exc
        try:
            finished = self._r().join_motion(timeout=self.config.stop_timeout_s)
        except FRANKY_ERRORS as exc:
            if not _is_preemption(exc):
                raise self._latch(exc) from exc
            finished = True
        if not finished:
            log.critical("ARM DID NOT STOP within %.1f s", self.config.stop_timeout_s)
            raise ArmFault(f"arm did not stop within {self.config.stop_timeout_s} s")

    def recover(self) -> None:
        """``recover_from_errors`` — only ever on an explicit operator action."""
        with self._lock:
            self._r()
            log.warning("operator recovery of the arm (fault was: %s)", self._fault)
            try:
                ok = self._r().recover_from_errors()
            except FRANKY_ERRORS as exc:
                raise ArmFault(f"recovery failed: {describe(exc)}") from exc
            if not ok or self._r().has_errors:
                raise ArmFault("recovery failed: the controller still reports errors")
            self._fault, self._fault_kind, self._fault_flags = None, None, ()
            log.info("arm recovered: the controller reports no errors")

    @property
    def halted(self) -> bool:
        return self._halted

    def resume(self) -> None:
        with self._lock:
            self._halted = False

    def home(self) -> None:
        """Lift, check, traverse, set the joints (see the module's docstring)."""
        c = self.config
        target = np.clip(np.asarray(c.home_q), self._q_lo, self._q_hi)
        deadline = self.clock.now() + c.home_timeout_s
        with self._lock:
            self._ready_to_move("home")
            try:
                s = self._r().state
                home = self._r().model.pose(franky.Frame.EndEffector, target, s.F_T_EE, s.EE_T_K)
            except FRANKY_ERRORS as exc:
                raise self._latch(exc) from exc
            xyz = np.array(s.O_T_EE.translation, dtype=np.float64)
            quat = np.array(s.O_T_EE.quaternion, dtype=np.float64)
            q7 = float(s.q[6])
        home_quat = np.array(home.quaternion, dtype=np.float64)
        q7_lo, q7_hi = float(self._q_lo[6]), float(self._q_hi[6])
        # before anything moves (the lift keeps the wrist as it is); again
        # before each stage of "across", from the joints then measured
        check_wrist_turn(quat, home_quat, q7, q7_lo, q7_hi)
        clear = c.home_clearance_z_m
        # relative to the Robot's global factor, which caps every motion
        factor = min(1.0, c.home_dynamics_factor / c.relative_dynamics_factor)

        def capped(kind: ArmCommandKind, target: np.ndarray) -> float:
            """The homing factor, lowered to keep this move under the cap
            (from the measured pose when the move starts: ``make`` runs under
            the lock, just before the motion)."""
            cmd = ArmCommand(kind, target, max_tool_speed=c.home_max_tool_speed)
            return min(factor, self._velocity_factor(cmd))

        def to_pose(xyz: np.ndarray, quat: np.ndarray) -> Callable[[], Any]:
            pose = np.concatenate([xyz, quat])
            return lambda: franky.CartesianMotion(
                franky.Affine(xyz, quat),
                relative_dynamics_factor=capped(ArmCommandKind.cartesian_pose, pose),
            )

        cartesian = ArmCommandKind.cartesian_pose.value
        if xyz[2] < clear:
            self._home_move(to_pose(np.array([xyz[0], xyz[1], clear]), quat), cartesian, deadline)
            z = float(self.read_state().ee_pose[2])
            if z < clear - c.home_lift_tolerance_m:
                raise ArmFault(
                    f"homing: could not lift the tool to z = {clear:.3f} m "
                    f"(it stopped at z = {z:.3f} m); not moving across"
                )
        across = np.array(home.translation, dtype=np.float64)
        across[2] = max(across[2], clear)
        # across in stages, none turning the wrist more than a quarter turn,
        # each checked first for where it leaves joint 7 (homing.py)
        start = self.read_state().ee_pose
        stages = wrist_stages(start[3:], home_quat)
        for k in range(1, stages + 1):
            now = self.read_state()
            check_wrist_turn(now.ee_pose[3:], home_quat, float(now.q[6]), q7_lo, q7_hi)
            s = k / stages
            stage_xyz = start[:3] + (across - start[:3]) * s
            self._home_move(to_pose(stage_xyz, slerp(start[3:], home_quat, s)), cartesian, deadline)
        # the final joint move keeps the tool above the clearance (or home's
        # own height, where home is lower) all along its joint-space line
        floor = min(clear, float(home.translation[2])) - c.home_lift_tolerance_m
        check_joint_line(
            lambda q: float(self.tool_transform(q)[2, 3]), self.read_state().q, target, floor
        )
        self._home_move(
            lambda: franky.JointMotion(
                target,
                relative_dynamics_factor=capped(ArmCommandKind.joint_position, target),
            ),
            ArmCommandKind.joint_position.value,
            deadline,
        )
        self._settle(target)

    def _home_move(self, make: Callable[[], Any], interface: str, deadline: float) -> None:
        """One slow homing move, started under the lock after the halt check and
        waited for outside it, so that telemetry keeps flowing and a stop ends
        it (``ArmHalted``)."""
        with self._lock:
            self._ready_to_move("home")
            try:
                self._start_motion(make, interface)
            except FRANKY_ERRORS as exc:
                raise self._latch(exc) from exc
        try:
            finished = self._r().join_motion(timeout=max(0.0, deadline - self.clock.now()))
        except ArmFault:
            raise  # disconnected meanwhile: nothing of franky's to latch
        except FRANKY_ERRORS as exc:
            if _is_preemption(exc):
                raise ArmHalted("home") from exc
            with self._lock:
                raise self._latch(exc) from exc
        if self._halted:
            raise ArmHalted("home")
        if not finished:
            self.stop()
            raise ArmFault(f"arm did not reach home within {self.config.home_timeout_s} s")

    def _settle(self, target: np.ndarray) -> None:
        """The trajectory has ended; the joints converge a little after it."""
        c = self.config
        settle_until = self.clock.now() + c.settle_timeout_s
        while True:
            error = float(np.max(np.abs(self.read_state().q - target)))
            if error <= c.home_tolerance_rad:
                return
            if self.clock.now() >= settle_until:
                raise ArmFault(
                    f"arm stopped {error:.3f} rad from home (tolerance {c.home_tolerance_rad})"
                )
            self.clock.sleep_until(self.clock.now() + 0.01)


def library_versions() -> dict[str, str]:
    """franky's and its bundled libfranka's versions. The robot's server
    version is not among them: franky 2.0 binds ``server_version`` only on
    the Franka Hand's ``Gripper`` (``_franky.pyi``), not on ``Robot``
    (libfranka's ``Robot::serverVersion`` is unbound); a server that does not
    match the bundled libfranka refuses the connection with
    ``IncompatibleVersionException``, which connect reports."""
    from importlib import metadata

    versions = {"robot server": "not exposed by franky (a mismatch refuses to connect)"}
    try:
        versions["franky-control"] = metadata.version("franky-control")
        files = metadata.files("franky-control") or []
    except metadata.PackageNotFoundError:
        return versions
    for f in files:
        # the wheel bundles libfranka as franky_control.libs/libfranka-<hash>.so.<version>
        name = f.name
        if name.startswith("libfranka") and ".so." in name:
            versions["libfranka"] = name.split(".so.", 1)[1]
    return versions


def _controller_error(s: Any) -> tuple[str | None, ArmErrorKind | None, tuple[str, ...]]:
    """The error a controller state reports when nothing is latched here: its
    current errors, or the reflex that holds it in Reflex mode."""
    reflex = s.robot_mode == franky.RobotMode.Reflex
    current = _flags(s.current_errors)
    last = _flags(s.last_motion_errors) if reflex else ()
    kind = ArmErrorKind.reflex if reflex else ArmErrorKind.control
    if current:
        return f"controller errors: {_error_names(s.current_errors)}", kind, unique(current + last)
    if reflex:
        return f"reflex: {_error_names(s.last_motion_errors) or 'robot in Reflex mode'}", kind, last
    return None, None, ()


def _log_reflex_abort(exc: BaseException) -> None:
    # the reflex-then-stop case: not a failure to stop (no CRITICAL), but it
    # belongs with the episode's fault lines (proctor.station.logs)
    log.info(
        "stop: the controller's reflex had already stopped the arm (%s)",
        exc,
        extra={"episode_fault": True},
    )


def _axes(travel: np.ndarray) -> float:
    """√n for the n axes of a tool-frame travel that move: n axes each at its
    own limit move the tool at √n × that limit. An axis with under a tenth of
    the longest travel is not counted: Ruckig synchronises the axes' durations
    (franky's default), so from rest it moves at under a tenth of its limit
    and two such add under 1 % to the speed (a residual, not verified on hardware:
    a waypoint that starts while another axis still moves fast)."""
    longest = float(np.max(np.abs(travel)))
    n = int(np.count_nonzero(np.abs(travel) > max(1e-4, 0.1 * longest)))
    return math.sqrt(max(1, n))


def _quat_matrix(quat: np.ndarray) -> np.ndarray:
    from proctor.core.geometry import quat_to_matrix

    return quat_to_matrix(quat / np.linalg.norm(quat))


def _changed(asked: ArmCommand, sent: ArmCommand) -> bool:
    """Whether the clip changed a command beyond float rounding; a pose's
    quaternion only normalised is not a change."""
    a = asked.target
    if asked.kind == ArmCommandKind.cartesian_pose:
        a = np.concatenate([a[:3], a[3:] / np.linalg.norm(a[3:])])
    return not np.allclose(sent.target, a, rtol=1e-9, atol=1e-12)


def _clip_norm(v: np.ndarray, limit: float) -> np.ndarray:
    norm = float(np.linalg.norm(v))
    return v if norm <= limit else v * (limit / norm)


__all__ = ["N_JOINTS", "FrankyArm", "FrankyArmConfig", "Realtime", "describe"]
