"""The simulated cell's arm, behind the station's ``Arm`` interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from proctor.station.drivers.arm.base import (
    ARMS,
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
    RobotMode,
)
from proctor.station.drivers.arm.faults import FlagCauses
from proctor.station.drivers.arm.flags import flags_in
from proctor.station.drivers.arm.franky_faults import FLAG_CAUSES
from proctor.station.drivers.arm.homing import (
    check_joint_line,
    check_wrist_turn,
    slerp,
    wrist_stages,
)
from proctor.station.sim import kinematics as kin
from proctor.station.sim.world import CARTESIAN_BOX, Q_MAX, Q_MIN, SimParams, SimWorld

# homing is done once the arm has stayed at its target and at rest this long,
# within this many radians on every joint (a single sample at rest can be the
# turning point of an overshoot)
_SETTLE_S = 0.05
_SETTLED_RAD = 1e-4


@dataclass(frozen=True)
class SimArmConfig(ArmConfig):
    driver: ClassVar[str] = "sim"
    # homing gives up after this much clock time (the real arm would raise too)
    home_timeout_s: float = 15.0
    home_tolerance_rad: float = 0.005
    # homing first lifts the fingertips this far above the bins' rims (m) …
    home_clearance_m: float = 0.06
    # … and moves at this fraction of the station's speed limits
    home_speed_scale: float = 0.3


def sim_arm_limits(params: SimParams) -> ArmLimits:
    """The limits of ``SimWorld.clip_command`` (and its braking)."""
    lo, hi = CARTESIAN_BOX
    return ArmLimits(
        q_min=Q_MIN.copy(),
        q_max=Q_MAX.copy(),
        dq_max=kin.DQ_MAX.copy(),
        ddq_max=kin.DDQ_MAX.copy(),
        dq_rated=kin.DQ_MAX.copy(),
        max_linear_velocity=params.v_max,
        max_angular_velocity=params.w_max,
        workspace_min=np.array(lo),
        workspace_max=np.array(hi),
    )


@ARMS.register("sim")
class SimArm(Arm[SimArmConfig]):
    def __init__(self, world: SimWorld, config: SimArmConfig | None = None) -> None:
        self.world = world
        self.config = config or SimArmConfig()
        self._connected = False
        # the halt latch (see Arm): set by stop() under the world's lock, which
        # every command takes too
        self._halted = False

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    @property
    def is_connected(self) -> bool:
        return self._connected

    def _need(self) -> None:
        if not self._connected:
            raise ArmFault("simulated arm: not connected")

    def read_state(self) -> ArmState:
        self._need()
        w = self.world
        with w.lock:
            w.sync()
            return ArmState(
                t=w.t,
                q=w.q.copy(),
                dq=w.dq.copy(),
                ee_pose=w.ee_pose(),
                error=w.error,
                # the simulated controller's only error is a reflex, worded with
                # libfranka's flag names (proctor.station.sim.world)
                error_kind=ArmErrorKind.reflex if w.error is not None else None,
                error_flags=flags_in(w.error),
                mode=self._mode(),
            )

    def fault_flag_causes(self) -> FlagCauses:
        """libfranka's, as the franky driver's: the simulated controller words its
        reflexes with libfranka's flags."""
        return FLAG_CAUSES

    def _mode(self) -> RobotMode:
        """The simulated controller's equivalent of the robot's mode (it has no
        enabling device and no hand guiding)."""
        w = self.world
        if w.error is not None:
            return RobotMode.reflex
        # at rest by the same measure homing uses (the last mrad/s of convergence is rest)
        moving = bool(np.any(np.abs(w.dq) > 1e-3))
        return RobotMode.move if moving else RobotMode.idle

    def send(self, command: ArmCommand) -> ArmCommand:
        self._need()
        return self._command(command, "move")

    def _command(self, command: ArmCommand, what: str, speed_scale: float = 1.0) -> ArmCommand:
        # the latch is checked under the same lock stop() takes to set it
        with self.world.lock:
            if self._halted:
                raise ArmHalted(what)
            return self.world.command_arm(command, speed_scale=speed_scale)

    def tool_transform(self, q: np.ndarray) -> np.ndarray:
        """The simulated cell's own FR3 kinematics (``proctor.station.sim.kinematics``)."""
        return kin.forward(np.asarray(q, dtype=np.float64))[2]

    def kinematics(self, q: np.ndarray) -> ArmKinematics:
        """The same model with the elbow, the wrist and the Jacobians."""
        return kin.arm_kinematics(q)

    def limits(self) -> ArmLimits:
        """What the simulated cell's ``clip_command`` holds a command to."""
        return sim_arm_limits(self.world.params)

    def stop(self) -> None:
        if self._connected:
            with self.world.lock:
                self._halted = True
                self.world.stop_arm()

    @property
    def halted(self) -> bool:
        return self._halted

    def resume(self) -> None:
        with self.world.lock:
            self._halted = False

    def recover(self) -> None:
        self._need()
        self.world.recover()

    def home(self) -> None:
        """Drive to ``home_q`` on the clock (a virtual clock is advanced by this call).

        Homing may start anywhere a stop left the arm, the fingers down in a
        tote among the items included, where a direct joint move would sweep
        the fingers through a tote wall (a collision reflex). So it goes in
        three slow moves: straight up until the fingertips clear the bins'
        rims by ``home_clearance_m``, across in a straight line to the home
        pose (every point of it above that height; in stages, none turning the
        wrist more than a quarter turn, joint 7 checked before each), then the
        joints to ``home_q`` exactly, their joint-space line checked first to
        keep the fingertips above the clearance (``drivers.arm.homing``)."""
        self._need()
        w = self.world
        cfg = self.config
        deadline = w.clock.now() + cfg.home_timeout_s
        with w.lock:
            w.sync()
            if self._halted:
                raise ArmHalted("home")
            if w.error is not None:
                raise ArmFault(f"arm in error, not homing: {w.error}")
            pose = w.ee_pose()
            q7 = float(w.q[6])
            clear = w.layout.rim_height + cfg.home_clearance_m
        target_q = np.array(cfg.home_q)
        _, _, tool = kin.forward(target_q)
        home_xyz, home_quat = tool[:3, 3], kin.matrix_to_quat(tool[:3, :3])
        # before anything moves (the lift keeps the wrist as it is); again
        # before each stage of "across", from the joints then measured
        check_wrist_turn(pose[3:], home_quat, q7, float(Q_MIN[6]), float(Q_MAX[6]))
        if pose[2] < clear:
            lift = pose.copy()
            lift[2] = clear
            self._move(ArmCommand(ArmCommandKind.cartesian_pose, lift), deadline)
            z = self.read_state().ee_pose[2]
            if z < w.layout.rim_height + 0.5 * cfg.home_clearance_m:
                raise ArmFault(
                    f"homing: could not lift the tool clear of the bins "
                    f"(it stopped at z = {z:.3f} m)"
                )
        # across in stages, none turning the wrist more than a quarter turn,
        # each checked first for where it leaves joint 7 (as FrankyArm: homing.py)
        start = self.read_state().ee_pose
        stages = wrist_stages(start[3:], home_quat)
        for k in range(1, stages + 1):
            now = self.read_state()
            check_wrist_turn(
                now.ee_pose[3:], home_quat, float(now.q[6]), float(Q_MIN[6]), float(Q_MAX[6])
            )
            s = k / stages
            stage = np.concatenate(
                [start[:3] + (home_xyz - start[:3]) * s, slerp(start[3:], home_quat, s)]
            )
            self._move(ArmCommand(ArmCommandKind.cartesian_pose, stage), deadline)
        # the final joint move keeps the fingertips above the clearance (or
        # home's own height, where home is lower) all along its joint-space line
        floor = min(clear, float(home_xyz[2])) - 0.5 * cfg.home_clearance_m
        check_joint_line(
            lambda q: float(self.tool_transform(q)[2, 3]), self.read_state().q, target_q, floor
        )
        self._move(ArmCommand(ArmCommandKind.joint_position, target_q), deadline, joints=True)

    def _move(self, command: ArmCommand, deadline: float, joints: bool = False) -> None:
        """One homing move at ``home_speed_scale``; returns once the arm is there
        and at rest, or (Cartesian moves) once it has come to rest short of it."""
        w = self.world
        cfg = self.config
        self._command(command, "home", speed_scale=cfg.home_speed_scale)
        clock = w.clock
        still_since: float | None = None
        # at the target and at rest since (when, where): a single sample at rest can
        # be the turning point of the last overshoot, the arm moving again after it
        settled: tuple[float, np.ndarray] | None = None
        while True:
            with w.lock:
                w.sync()
                if self._halted:  # a stop during homing ends it here
                    raise ArmHalted("home")
                if w.error is not None:
                    raise ArmFault(f"arm in error, not homing: {w.error}")
                moving = bool(np.any(np.abs(w.dq) > 1e-3))
                if joints:
                    there = float(np.max(np.abs(w.q - command.target))) < cfg.home_tolerance_rad
                else:
                    there = float(np.linalg.norm(w.tcp - command.target[:3])) < 0.002
                now = w.t
                q = w.q.copy()
            if not moving and there:
                if settled is None or float(np.max(np.abs(q - settled[1]))) > _SETTLED_RAD:
                    settled = (now, q)
                elif now - settled[0] >= _SETTLE_S:
                    return
            else:
                settled = None
            if not moving and not there:
                still_since = now if still_since is None else still_since
                if not joints and now - still_since > 0.2:
                    return  # at rest short of the target (out of reach): the next move decides
            else:
                still_since = None
            if clock.now() > deadline:
                raise ArmFault(f"arm did not reach home within {cfg.home_timeout_s:g} s")
            clock.sleep_until(clock.now() + w.dt)
