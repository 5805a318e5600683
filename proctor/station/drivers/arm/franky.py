"""Franka FR3 through franky-control (which bundles libfranka).

Each station command becomes an asynchronous franky motion; a newer command
preempts the one in progress (franky motion objects are single-use, so every
command builds a fresh one). State is read straight from libfranka's latest
1 kHz sample, fast enough for ≥ 100 Hz telemetry.

Faults: an exception out of a motion (a reflex, a lost link) latches the
arm as faulted, with libfranka's text; ``read_state`` reports it in
``ArmState.error`` and ``send`` refuses to move until an operator calls
``recover``. Nothing here recovers on its own.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

import franky
import numpy as np

from proctor.station.clock import Clock, MonotonicClock
from proctor.station.drivers.arm.base import (
    ARMS,
    N_JOINTS,
    Arm,
    ArmCommand,
    ArmCommandKind,
    ArmConfig,
    ArmFault,
    ArmState,
)

log = logging.getLogger(__name__)

# libfranka's text when a motion is cut short by ``stop()`` or replaced by a
# newer ``move``: our own doing, never a fault
PREEMPTED_TEXT = "preempted"
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
FRANKY_ERRORS = (*COMMUNICATION_ERRORS, *CONTROL_ERRORS)


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
    # how long homing may take before it is a fault: the longest home move
    # (~3 rad on joint 1) at 10 % dynamics takes about 10 s
    home_timeout_s: float = 20.0
    # homing succeeds within this joint error: the controller's impedance
    # leaves a few mrad (franky-sim 5–15 mrad) short of the target
    home_tolerance_rad: float = 0.03
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
    # FR3 datasheet end-effector limits: 3.0 m/s translation, 2.5 rad/s rotation
    max_linear_velocity: float = 3.0
    max_angular_velocity: float = 2.5
    # a velocity command holds for this long and then ramps to zero, so a
    # policy that stops sending (crash, hang) stops the arm: three periods of
    # a 15 Hz control loop
    velocity_hold_s: float = 0.2
    # Cartesian targets are clipped to this box (m, robot base frame): above
    # the table top and inside the cell's fence
    workspace_min: tuple[float, float, float] = (0.15, -0.6, 0.02)
    workspace_max: tuple[float, float, float] = (0.85, 0.6, 0.9)
    # how long ``stop`` waits for the motion to wind down before it calls the
    # arm unstoppable (libfranka's stop decelerates within ~100 ms)
    stop_timeout_s: float = 1.0

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
            ("workspace_min", 3),
            ("workspace_max", 3),
        ):
            value = tuple(float(v) for v in getattr(self, name))
            if len(value) != size:
                raise ValueError(f"franky arm config: {name} needs {size} values, got {len(value)}")
            object.__setattr__(self, name, value)
        if not 0.0 < self.relative_dynamics_factor <= 1.0:
            raise ValueError("franky arm config: relative_dynamics_factor must be in (0, 1]")
        if not 0.0 < self.home_dynamics_factor <= 1.0:
            raise ValueError("franky arm config: home_dynamics_factor must be in (0, 1]")
        for name in ("acceleration_factor", "jerk_factor"):
            value = getattr(self, name)
            if value is not None and not 0.0 < value <= 1.0:
                raise ValueError(f"franky arm config: {name} must be in (0, 1]")

    @property
    def dynamics(self) -> tuple[float, float, float]:
        """The Robot's global (velocity, acceleration, jerk) factors."""
        v = self.relative_dynamics_factor
        return (v, self.acceleration_factor or v, self.jerk_factor or v)


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
    return robot


def _error_names(errors: Any) -> str | None:
    """libfranka's ``Errors`` print as a list of the active flags' names."""
    text = repr(errors)
    return None if text in ("[]", "") else text


def _is_preemption(exc: BaseException) -> bool:
    return isinstance(exc, franky.ControlException) and PREEMPTED_TEXT in str(exc)


def describe(exc: BaseException) -> str:
    """A fault's text: its kind and libfranka's own words."""
    if isinstance(exc, COMMUNICATION_ERRORS):
        kind = "communication"
    elif isinstance(exc, franky.ControlException) and "reflex" in str(exc).lower():
        kind = "reflex"
    else:
        kind = "control"
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
        # the control interface of the motion last started (franky runs one
        # loop per interface; see _start_motion)
        self._interface: str | None = None
        self._q_lo = np.asarray(config.q_min) + config.joint_margin_rad
        self._q_hi = np.asarray(config.q_max) - config.joint_margin_rad
        self._dq_max = np.asarray(config.max_joint_velocity) * config.relative_dynamics_factor
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
        """Record a fault, make sure nothing keeps moving, and say so."""
        text = describe(exc)
        if self._fault is None:
            self._fault = text
            log.error("ARM FAULT: %s", text)
            self._safety_stop()
        return ArmFault(text)

    def _safety_stop(self) -> None:
        try:
            self._robot.stop()
        except Exception:
            # after a reflex the controller has already stopped the arm; after
            # a lost link nothing can reach it — either way somebody must look
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
            if not _is_preemption(exc):
                self._latch(exc)

    # -- the Arm role --------------------------------------------------------
    def read_state(self) -> ArmState:
        with self._lock:
            self._r()
            self._poll()  # a latched fault is reported in the state below
            try:
                s = self._r().state
            except FRANKY_ERRORS as exc:
                raise self._latch(exc) from exc
            t = self.clock.now()
            pose = s.O_T_EE
            self._ee_frames = (s.F_T_EE, s.EE_T_K)
            error = self._fault
            if error is None:
                controller = _error_names(s.current_errors)
                if controller is not None:
                    error = f"controller errors: {controller}"
                elif s.robot_mode == franky.RobotMode.Reflex:
                    error = (
                        f"reflex: {_error_names(s.last_motion_errors) or 'robot in Reflex mode'}"
                    )
            return ArmState(
                t=t,
                q=np.array(s.q, dtype=np.float64),
                dq=np.array(s.dq, dtype=np.float64),
                ee_pose=np.concatenate([pose.translation, pose.quaternion]).astype(np.float64),
                error=error,
            )

    def clip(self, command: ArmCommand) -> ArmCommand:
        """The command the arm will actually execute: inside the joint limits,
        the velocity limits and the workspace box, with a unit quaternion."""
        c = self.config
        target = command.target
        if command.kind == ArmCommandKind.joint_position:
            target = np.clip(target, self._q_lo, self._q_hi)
        elif command.kind == ArmCommandKind.joint_velocity:
            target = np.clip(target, -self._dq_max, self._dq_max)
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
        return ArmCommand(command.kind, target, command.max_tool_speed)

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
            # franky limits each translation axis on its own (Ruckig DoFs:
            # ``src/motion/cartesian_waypoint_motion.cpp``,
            # getAbsoluteInputLimits), so n moving axes reach √n × the limit
            travel = command.target[:3] - np.asarray(robot.state.O_T_EE.translation)
            moving = max(1, int(np.count_nonzero(np.abs(travel) > 1e-4)))
            bound = float(robot.translation_velocity_limit.get()) * v_global * math.sqrt(moving)
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

    def _motion(self, command: ArmCommand) -> Any:
        # the Robot already scales every motion by its factors (given at
        # connect); a motion's own factor multiplies on top: its velocity part
        # holds a position motion to the envelope's tool speed cap
        factor = franky.RelativeDynamicsFactor(self._velocity_factor(command), 1.0, 1.0)
        hold = franky.Duration(round(self.config.velocity_hold_s * 1000))
        t = command.target
        if command.kind == ArmCommandKind.joint_position:
            return franky.JointMotion(t, relative_dynamics_factor=factor)
        if command.kind == ArmCommandKind.joint_velocity:
            return franky.JointVelocityMotion(t, duration=hold, relative_dynamics_factor=factor)
        if command.kind == ArmCommandKind.cartesian_pose:
            return franky.CartesianMotion(
                franky.Affine(t[:3], t[3:]), relative_dynamics_factor=factor
            )
        return franky.CartesianVelocityMotion(
            franky.Twist(t[:3], t[3:]), duration=hold, relative_dynamics_factor=factor
        )

    def send(self, command: ArmCommand) -> ArmCommand:
        sent = self.clip(command)
        with self._lock:
            self._r()
            self._poll()
            if self._fault is not None:
                raise ArmFault(f"arm is faulted, refusing to move: {self._fault}")
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
            if self._robot is None:
                return
            try:
                self._r().stop()
            except COMMUNICATION_ERRORS as exc:
                raise self._latch(exc) from exc
            except CONTROL_ERRORS:
                log.debug("stop on an idle arm", exc_info=True)
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
            self._fault = None

    def home(self) -> None:
        c = self.config
        with self._lock:
            self._r()
            self._poll()
            if self._fault is not None:
                raise ArmFault(f"arm is faulted, refusing to home: {self._fault}")
            target = np.clip(np.asarray(c.home_q), self._q_lo, self._q_hi)
            # relative to the Robot's global factor, which caps every motion
            factor = min(1.0, c.home_dynamics_factor / c.relative_dynamics_factor)
            try:
                self._start_motion(
                    lambda: franky.JointMotion(target, relative_dynamics_factor=factor),
                    ArmCommandKind.joint_position.value,
                )
            except FRANKY_ERRORS as exc:
                raise self._latch(exc) from exc
        # wait outside the lock so telemetry keeps flowing and an operator
        # stop can preempt the homing motion
        try:
            finished = self._r().join_motion(timeout=c.home_timeout_s)
        except FRANKY_ERRORS as exc:
            if _is_preemption(exc):
                raise ArmFault("homing was interrupted by a stop") from exc
            with self._lock:
                raise self._latch(exc) from exc
        if not finished:
            self.stop()
            raise ArmFault(f"arm did not reach home within {c.home_timeout_s} s")
        # the trajectory has ended; the joints converge a little after it
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


def _clip_norm(v: np.ndarray, limit: float) -> np.ndarray:
    norm = float(np.linalg.norm(v))
    return v if norm <= limit else v * (limit / norm)


__all__ = ["N_JOINTS", "FrankyArm", "FrankyArmConfig", "Realtime", "describe"]
