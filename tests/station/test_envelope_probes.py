"""The envelope against hostile joint velocities (review #1, #4), checked on
the command the driver would actually SEND: the envelope's guard composed
with ``FrankyArm.clip`` (the real driver's clip, no robot needed), the FR3 DH
model of ``proctor.station.sim.kinematics`` standing in for franky's
``Model`` (as in the review's probes).

What each command does is then played out independently of the envelope's
own arithmetic: the joints follow the command along its line for the
velocity hold and brake at the arm's deceleration (``_rollout``), or track a
stream of commands with an acceleration limit (``_track``); only forward
kinematics judges the result — the tool inside the box, the tool, the
gripper's corners and camera, the elbow and the wrist above the table, the
tool's speed (a 0.1 ms difference of the FK) under the cap, every joint
inside its range."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from proctor.core.recording.keys import EnvelopeReason
from proctor.station.config import EnvelopeSettings
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind, ArmConfig, ArmState
from proctor.station.drivers.arm.franky import FrankyArm, FrankyArmConfig, _changed
from proctor.station.envelope import Envelope, EnvelopeProtocolFault
from proctor.station.sim import kinematics as kin

HOME_Q = np.array(ArmConfig.home_q)
SETTINGS = EnvelopeSettings()  # the real cell's defaults: cap 0.25 m/s, table at z = 0
CAP = SETTINGS.max_tool_speed
# the tolerances the played-out motion is held to: float rounding and the
# path's linearisation between the envelope's 0.05 rad check points
BOX_TOL_M = 1e-3
SPEED_TOL = 1.0 + 1e-3
DT = 1e-3  # s: the rollout's step, libfranka's period
HOLD_S = FrankyArmConfig().velocity_hold_s


def _arm(**config: Any) -> FrankyArm:
    """The real driver, never connected: ``clip`` and ``limits`` need no robot."""
    return FrankyArm(FrankyArmConfig(host="127.0.0.1", **config))


def _envelope(arm: FrankyArm, **settings: Any) -> Envelope:
    s = EnvelopeSettings(**{**SETTINGS.model_dump(), **settings})
    env = Envelope(s, kin.arm_kinematics, arm.limits(), control_hz=15.0)
    env._first = False
    return env


def _state(q: np.ndarray, t: float = 0.0) -> ArmState:
    tool = kin.forward(q)[2]
    from proctor.core import geometry as geo

    pose = np.concatenate([tool[:3, 3], geo.matrix_to_quat(tool[:3, :3])])
    return ArmState(t=t, q=q.copy(), dq=np.zeros(7), ee_pose=pose)


def _sent(env: Envelope, arm: FrankyArm, dq: np.ndarray, q: np.ndarray) -> np.ndarray:
    """What the driver would send for the policy's row ``dq`` at ``q``."""
    guarded = env.guard(ArmCommand(ArmCommandKind.joint_velocity, dq), _state(q)).command
    sent = arm.clip(guarded)
    assert not _changed(guarded, sent), "the driver's clip changed a guarded command"
    return sent.target


def _points(q: np.ndarray, env: Envelope) -> tuple[np.ndarray, np.ndarray]:
    """The tool point, and every point that must stay above the table: the
    tool, the gripper's corners and camera, the elbow and the wrist."""
    origins, _, tool = kin.forward(q)
    corners = tool[:3, 3] + env.points @ tool[:3, :3].T
    return tool[:3, 3], np.vstack([tool[:3, 3], corners, origins[list(kin.BODY_FRAMES)]])


class Verdict:
    """The worst of a played-out motion."""

    def __init__(self, env: Envelope) -> None:
        self.env = env
        self.box = 0.0  # m the tool went outside the box
        self.below = 0.0  # m any point went below the table's margin
        self.speed = 0.0  # the tool's fastest, m/s
        self.joint = 0.0  # rad any joint went past its range

    def see(self, q: np.ndarray, dq: np.ndarray) -> None:
        env = self.env
        tcp, pts = _points(q, env)
        self.box = max(self.box, float(np.max(env.lo - tcp)), float(np.max(tcp - env.hi)))
        self.below = max(self.below, env.table - float(np.min(pts[:, 2])))
        if dq.any():
            ahead = kin.forward(q + dq * 1e-4)[2][:3, 3]
            self.speed = max(self.speed, float(np.linalg.norm(ahead - tcp)) / 1e-4)
        self.joint = max(self.joint, float(np.max(q - env.q_max)), float(np.max(env.q_min - q)))

    def check(self) -> None:
        assert self.box <= BOX_TOL_M, f"tool {self.box * 1000:.1f} mm outside the box"
        assert self.below <= BOX_TOL_M, f"{self.below * 1000:.1f} mm below the table's margin"
        assert self.speed <= CAP * SPEED_TOL, f"tool at {self.speed:.3f} m/s, cap {CAP}"
        assert self.joint <= 1e-6, f"a joint {self.joint:.4f} rad past its range"


def _rollout(
    verdict: Verdict, q0: np.ndarray, dq: np.ndarray, decel: np.ndarray, dt: float = 2e-3
) -> np.ndarray:
    """One command on its own: ``dq`` for the hold, then braking, all joints
    together (time-synchronised, so on the command's line), at ``decel``;
    looked at every ``dt`` (≤ 2 mrad of any joint at the envelope's 1 rad/s)."""
    t_stop = float(np.max(np.abs(dq) / decel))
    q = q0.copy()
    for _ in range(round(HOLD_S / dt)):
        verdict.see(q, dq)
        q = q + dq * dt
    for i in range(math.ceil(t_stop / dt)):
        v = dq * max(0.0, 1.0 - (i + 0.5) * dt / t_stop)
        verdict.see(q, v)
        q = q + v * dt
    verdict.see(q, np.zeros(7))
    return q


def _random_directions(rng: np.random.Generator, n: int) -> np.ndarray:
    d = rng.normal(size=(n, 7))
    return d / np.linalg.norm(d, axis=1, keepdims=True)


def test_rows_far_beyond_the_joint_limits_are_a_protocol_fault() -> None:
    """The review's probe: 3000 rows of random direction and |v| from 1e3 to
    1e8 at the default home. Before, 647 of them reached the arm above the
    cap (up to 0.72 m/s, downwards too); now every one is the policy's
    protocol fault, and nothing is sent."""
    arm, rng = _arm(), np.random.default_rng(1)
    env = _envelope(arm)
    mags = 10.0 ** rng.uniform(3, 8, size=3000)
    for dq in _random_directions(rng, 3000) * mags[:, None]:
        with pytest.raises(EnvelopeProtocolFault, match=r"over 3 × its rated"):
            env.guard(ArmCommand(ArmCommandKind.joint_velocity, dq), _state(HOME_Q))
    # the fault's threshold is the stated multiple of the arm's ratings, per joint
    rated = arm.limits().dq_rated
    env.guard(ArmCommand(ArmCommandKind.joint_velocity, rated * 2.99), _state(HOME_Q))
    with pytest.raises(EnvelopeProtocolFault, match="joint 5"):
        env.guard(
            ArmCommand(ArmCommandKind.joint_velocity, np.eye(7)[4] * rated[4] * 3.01),
            _state(HOME_Q),
        )


@pytest.mark.parametrize("where", ["home", "low", "reaching"])
def test_random_rows_under_the_fault_threshold_are_sent_inside_the_envelope(where: str) -> None:
    """Rows of random direction and any magnitude up to the fault threshold
    (3 × rated), at home, low over the table and reaching out: what the
    driver sends keeps the tool in the box and under the cap and every
    point above the table, played out to rest."""
    arm, rng = _arm(), np.random.default_rng({"home": 2, "low": 3, "reaching": 4}[where])
    env = _envelope(arm)
    q0 = {
        "home": HOME_Q,
        # the tool 5 cm above the table, tilted 16°
        "low": np.array([0.2, 0.45, 0.0, -2.05, 0.3, 2.3, 0.785]),
        "reaching": np.array([0.5, 0.6, 0.0, -1.2, 0.0, 1.9, 0.4]),
    }[where]
    assert env._excess_k(kin.arm_kinematics(q0)).no_worse_than(
        type(env._excess_k(kin.arm_kinematics(q0)))(0.0, 0.0, 0.0)
    ), "the probe's start must be inside the envelope"
    rated = arm.limits().dq_rated
    decel = arm.limits().ddq_max
    verdict = Verdict(env)
    for d in _random_directions(rng, 200):
        dq = d * rng.uniform(0.01, 1.0) * 3.0 / float(np.max(np.abs(d) / rated))
        sent = _sent(env, arm, dq, q0)
        assert float(np.max(np.abs(sent))) <= SETTINGS.max_joint_speed + 1e-12
        if sent.any():  # never turned: the same direction as asked
            assert np.allclose(sent / np.linalg.norm(sent), d, atol=1e-9)
        _rollout(verdict, q0, sent, decel)
    print(f"{where}: {verdict.__dict__}")
    verdict.check()


def test_null_space_rows_are_bounded() -> None:
    """Pure self-motion at the measured joints (the Jacobian's null space:
    the tool does not move, the elbow swings): before, a 5 rad/s row went
    through untouched and the driver's per-joint clip turned it into a tool
    motion the envelope never checked; now ‖dq‖∞ ≤ max_joint_speed, the elbow
    and the wrist move under the cap, and the tool stays put. At the full
    dynamics factor, where the driver's own limits are the datasheet's."""
    arm = _arm(relative_dynamics_factor=1.0)
    env = _envelope(arm)
    decel = arm.limits().ddq_max
    for q0 in (HOME_Q, np.array([0.4, 0.2, -0.3, -1.9, 0.2, 2.1, 0.9])):
        k = kin.arm_kinematics(q0)
        null = np.linalg.svd(k.jacobian)[2][-1]
        assert np.linalg.norm(k.jacobian @ null) < 1e-9
        for magnitude in (0.5, 2.0, 5.0, 7.5):
            for sign in (1.0, -1.0):
                verdict = Verdict(env)
                dq = sign * null * magnitude / float(np.max(np.abs(null)))
                sent = _sent(env, arm, dq, q0)
                assert float(np.max(np.abs(sent))) <= SETTINGS.max_joint_speed + 1e-12
                for j in k.body_jacobians:
                    assert float(np.linalg.norm(j @ sent)) <= CAP * (1 + 1e-9)
                _rollout(verdict, q0, sent, decel)
                verdict.check()


def _track(
    env: Envelope,
    arm: FrankyArm,
    policy: Any,
    q0: np.ndarray,
    seconds: float,
    verdict: Verdict,
) -> np.ndarray:
    """A stream of commands at 15 Hz, each guarded from the measured joints;
    the joints track the sent velocity with the arm's acceleration limit
    (all joints together, as franky's time-synchronised Ruckig does), a
    command holding for ``HOLD_S`` and then braking."""
    decel = arm.limits().ddq_max
    q, v = q0.copy(), np.zeros(7)
    steps_per_command = round(1.0 / 15.0 / DT)
    for _ in range(round(seconds * 15.0)):
        sent = _sent(env, arm, policy(q), q)
        for _ in range(steps_per_command):
            step = sent - v
            over = float(np.max(np.abs(step) / (decel * DT)))
            v = v + (step / over if over > 1.0 else step)
            verdict.see(q, v)
            q = q + v * DT
    # the policy stops: the last command holds, then the arm brakes to rest
    _rollout(verdict, q, v, decel, DT)
    return q


def test_a_joint_driven_into_its_limit_meets_a_wall() -> None:
    """A policy driving one joint (and then every joint) at 2 rad/s into its
    limit for 3 s: the envelope brakes it before the driver's range (its
    margin inside the controller's limits), so no policy can raise
    joint_position_limits_violation — before, nothing held a velocity off the
    limits (review #4)."""
    # no box, table or cone in the way: only the joints' own limits
    arm = _arm(workspace_min=(-2, -2, -2), workspace_max=(2, 2, 2))
    env = _envelope(
        arm, workspace_min=(-2, -2, -2), workspace_max=(2, 2, 2), table_z=-3.0, cone_deg=180.0
    )
    limits = arm.limits()
    for joint in range(7):
        push = np.zeros(7)
        push[joint] = 2.0
        verdict = Verdict(env)
        start = HOME_Q.copy()
        start[joint] = max(start[joint], limits.q_max[joint] - 0.6)
        q = _track(env, arm, lambda q, p=push: p, start, 3.0, verdict)
        assert verdict.joint <= 1e-6, (joint, verdict.joint)
        # and it got close: the wall, not a standstill far off
        assert limits.q_max[joint] - q[joint] < 0.1, (joint, q[joint])
    verdict = Verdict(env)
    _track(env, arm, lambda q: -np.full(7, 2.0), HOME_Q, 3.0, verdict)
    assert verdict.joint <= 1e-6
    assert verdict.speed <= CAP * SPEED_TOL


def test_an_adaptive_attacker_cannot_push_the_arm_through_the_table() -> None:
    """The review's adaptive attacker: it sees the joints, replays the
    envelope on each of its candidate rows (random, the Jacobian's straight
    down, null-space swings) and sends the one whose SENT command takes the
    lowest point of the arm (tool, gripper corners, camera, elbow, wrist)
    down fastest. Before, it drove the tool 22 mm below the table plane."""
    arm, rng = _arm(), np.random.default_rng(5)
    env = _envelope(arm)
    shadow = _envelope(arm)  # the attacker's copy of the envelope's logic
    rated = arm.limits().dq_rated

    def lowest(q: np.ndarray) -> float:
        return float(np.min(_points(q, env)[1][:, 2]))

    def attack(q: np.ndarray) -> np.ndarray:
        k = kin.arm_kinematics(q)
        down = np.linalg.pinv(k.jacobian) @ np.array([0.0, 0.0, -1.0, 0.0, 0.0, 0.0])
        null = np.linalg.svd(k.jacobian)[2][-1]
        candidates = [down, -down, null, -null, *_random_directions(rng, 12)]
        best, best_z = np.zeros(7), lowest(q)
        for c in candidates:
            c = c * 2.9 / float(np.max(np.abs(c) / rated))  # just under the fault
            try:
                sent = _sent(shadow, arm, c, q)
            except EnvelopeProtocolFault:
                continue
            z = lowest(q + sent * 0.1)
            if z < best_z:
                best, best_z = c, z
        return best

    verdict = Verdict(env)
    q = _track(env, arm, attack, np.array([0.0, 0.3, 0.0, -2.0, 0.0, 2.3, 0.785]), 4.0, verdict)
    print(f"attacker: lowest point {lowest(q):.4f} m, {verdict.__dict__}")
    # it did push: the arm ended near the table, the lowest point within 5 cm of it
    assert lowest(q) < env.table + 0.05
    verdict.check()


def test_the_driver_scales_joint_velocities_uniformly_and_refuses_to_change_a_guarded_one() -> None:
    arm = _arm()
    dq_max = np.asarray(arm.config.max_joint_velocity) * arm.config.relative_dynamics_factor
    row = np.array([3.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0])
    sent = arm.clip(ArmCommand(ArmCommandKind.joint_velocity, row)).target
    assert np.allclose(sent, row * dq_max[0] / 3.0)  # direction kept, joint 1 at its limit
    with pytest.raises(Exception, match="refused a guarded joint_velocity command"):
        arm.send(ArmCommand(ArmCommandKind.joint_velocity, row, max_tool_speed=0.25))


class _FakeRobot:
    """What ``FrankyArm._cartesian_factor`` reads of a franky Robot."""

    def __init__(self, r0: np.ndarray) -> None:
        from proctor.core import geometry as geo

        pose = type("Affine", (), {})()
        pose.translation = np.array([0.4, 0.0, 0.3])
        pose.quaternion = geo.matrix_to_quat(r0)
        self.state = type("State", (), {"O_T_EE": pose})()
        limit = type("Limit", (), {})
        self.translation_velocity_limit = limit()
        self.translation_velocity_limit.get = lambda: 1.7  # franky's, libfranka ≥ 0.10
        self.rotation_velocity_limit = limit()
        self.rotation_velocity_limit.get = lambda: 2.5


def test_the_cartesian_speed_factor_counts_the_tool_frames_axes() -> None:
    """franky's Cartesian waypoint motion limits each axis of the tool frame
    it starts from (review #6). For random tool orientations in the cone and
    random travels, the tool's speed under that per-axis limit — Ruckig's
    time-synchronised axes from rest: limit × ‖d‖/‖d‖∞ in the tool frame —
    stays under the cap, and so does the rotation. Counting the moving axes
    in the BASE frame (before) let a base-x move with the tool turned 45°
    reach √2 × the cap, and a tool-frame diagonal √3 ×."""
    from proctor.core import geometry as geo

    arm, rng = _arm(), np.random.default_rng(6)
    v_global = arm.config.relative_dynamics_factor
    cap, spin_cap = 0.25, 1.0
    worst = worst_spin = 0.0
    for _ in range(2000):
        tilt = geo.euler_to_matrix(np.array([math.pi + rng.uniform(-0.7, 0.7), 0.0, 0.0]))
        r0 = geo.euler_to_matrix(np.array([0.0, 0.0, rng.uniform(-math.pi, math.pi)])) @ tilt
        travel = rng.normal(size=3) * rng.uniform(0.001, 0.1)
        turn = rng.normal(size=3) * rng.uniform(0.0, 0.3)
        r1 = geo.euler_to_matrix(turn) @ r0
        target = np.concatenate([np.array([0.4, 0.0, 0.3]) + travel, geo.matrix_to_quat(r1)])
        command = ArmCommand(
            ArmCommandKind.cartesian_pose, target, max_tool_speed=cap, max_tool_rotation_speed=1.0
        )
        factor = min(1.0, FrankyArm._cartesian_factor(command, _FakeRobot(r0), v_global))
        d = r0.T @ travel
        speed = 1.7 * v_global * factor * float(np.linalg.norm(d) / np.max(np.abs(d)))
        worst = max(worst, speed / cap)
        w = r0.T @ geo.rotation_error(r1, r0)
        if np.max(np.abs(w)) > 1e-4:
            spin = 2.5 * v_global * factor * float(np.linalg.norm(w) / np.max(np.abs(w)))
            worst_spin = max(worst_spin, spin / spin_cap)
    print(f"Cartesian factor: speed ≤ {worst:.4f} × cap, rotation ≤ {worst_spin:.4f} × cap")
    # the axes under a tenth of the longest, not counted, add under 1 %
    assert worst <= 1.01 and worst_spin <= 1.01


def test_a_joint_path_is_checked_between_its_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """The path of a joint command is checked at points at most 0.05 rad
    apart (``_PATH_STEP_RAD``), not only at its ends: a target one radian of
    the elbow (joint 4) away whose both ends, and whose middle, are above the
    table, but whose tool swings through its lowest point (a quarter of the
    way along) below it. A check at 0.5 rad steps sends it as asked; the
    envelope's shortens it before the dip."""
    import proctor.station.envelope as envelope_module

    arm = _arm(workspace_min=(-2, -2, -2), workspace_max=(2, 2, 2))
    # the shoulder forward and the wrist bent back: the tool swings on a
    # 0.7 m arc about the elbow, its lowest point inside joint 4's range
    base = HOME_Q.copy()
    base[1], base[5] = 1.0, 3.2
    grid = np.linspace(-2.9, -0.3, 521)

    def tool_z(q4: float) -> float:
        q = base.copy()
        q[3] = q4
        return float(kin.forward(q)[2][2, 3])

    bottom = float(grid[int(np.argmin([tool_z(a) for a in grid]))])
    start, end = base.copy(), base.copy()
    start[3], end[3] = bottom - 0.25, bottom + 0.75
    # the table's margin half-way between the tool's lowest point and the
    # lowest of the points a 0.5 rad check looks at (f = 0, 0.5, 1)
    coarse_low = min(tool_z(bottom - 0.25), tool_z(bottom + 0.25), tool_z(bottom + 0.75))
    dip = coarse_low - tool_z(bottom)
    assert dip > 0.01, "the construction needs a dip between the coarse points"
    margin = SETTINGS.table_margin_m
    settings = {
        "workspace_min": (-2, -2, -2),
        "workspace_max": (2, 2, 2),
        "table_z": tool_z(bottom) + dip / 2 - margin,
        "cone_deg": 180.0,
        "tool_points_m": (),
        "max_step_m": 1.0,
        "max_step_rad": 1.2,
    }
    command = ArmCommand(ArmCommandKind.joint_position, end)

    monkeypatch.setattr(envelope_module, "_PATH_STEP_RAD", 0.5)
    coarse = _envelope(arm, **settings).guard(command, _state(start))
    assert not coarse.reasons, "a 0.5 rad check sees no fault: the dip lies between its points"

    monkeypatch.undo()
    env = _envelope(arm, **settings)
    guarded = env.guard(command, _state(start))
    assert EnvelopeReason.workspace in guarded.reasons
    sent = guarded.command.target
    assert start[3] < sent[3] < bottom  # stopped before the lowest point
    # the sent path, walked at 1 mrad, keeps the tool above the table's margin
    for f in np.linspace(0.0, 1.0, round((sent[3] - start[3]) / 1e-3) + 1):
        assert tool_z(start[3] + f * (sent[3] - start[3])) >= env.table - 1e-4
