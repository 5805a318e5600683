"""The envelope keeps the arm's body above the table under CARTESIAN commands
(review #1): a Cartesian pose or velocity says where the tool goes,
not the elbow, so the envelope predicts the joints along the tool's
commanded path (damped least squares from the measured joints) and holds the
command to the part along which the predicted elbow and wrist stay
``cartesian_body_margin_m`` above the table's margin.

The FR3 DH model of ``proctor.station.sim.kinematics`` stands in for franky's
``Model`` (as in ``test_envelope_probes.py``). What a command does is then
played out independently of the envelope's own prediction: a controller at
1 kHz tracking the tool's commanded trajectory by one of two redundancy
resolutions — the minimum-norm joint motion (franky-sim's own damped
pseudo-inverse) and one holding joint 3 still (the "elbow" libfranka's
Cartesian interface names) — and only forward kinematics judges where the
elbow, the wrist, the tool and the gripper's points went.

The scene: a cell whose cone lets the tool tilt past horizontal
(``cone_deg`` 135: reaching in under something) with the simulated cell's
point gripper (``tool_points_m`` empty). With the tool turned up, the wrist
hangs 6 cm below the tool point, so a move straight down that keeps the
tool well above the table takes the wrist through it. With the default 45°
cone and the 2F-85's points this takes an arm at the edge of its reach or
folded back over itself (a random search of joint space finds no other),
where no tracking is well-posed: the check is a backstop there.

``test_random_hostile_cartesian_commands_keep_the_body_above_the_table``
gives the figures before and after (printed with ``-s``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from proctor.core import geometry as geo
from proctor.core.recording.keys import EnvelopeReason
from proctor.station.config import EnvelopeSettings
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind, ArmConfig, ArmState
from proctor.station.envelope import Envelope, _rotvec_matrix
from proctor.station.sim import kinematics as kin
from proctor.station.sim.arm import sim_arm_limits
from proctor.station.sim.world import SimParams

HOME_Q = np.array(ArmConfig.home_q)
LIMITS = sim_arm_limits(SimParams())
# the tool turned up (tilted 120° from straight down) at (0.57, −0.05,
# 0.27), the wrist at z 0.20, 6 cm below it; well clear of singularities
UPTURNED_Q = np.array([0.27, 0.6, 0.13, -2.26, -1.92, 1.05, -1.94])
DT = 2e-3  # s: the played-out controller's period (libfranka's is 1 ms; 2 ms for speed)
HOLD_S, RAMP_S = 0.2, 0.2  # franky's velocity hold, then a ramp to rest
# how far a played-out point may pass a limit: the tracking's own lag
TOL_M = 1e-3


def _scene(q: np.ndarray, above_floor: float = 0.002, **settings: Any) -> EnvelopeSettings:
    """Settings with the table put so that the lowest of the elbow and the
    wrist at ``q`` stands ``above_floor`` above the envelope's floor for the
    predicted body (the table, its margin and the Cartesian margin); a cone
    of 135°, a point gripper, a box wide enough."""
    base = EnvelopeSettings()
    body = float(kin.arm_kinematics(q).body[:, 2].min())
    table = body - above_floor - base.table_margin_m - base.cartesian_body_margin_m
    return EnvelopeSettings(
        **{
            **base.model_dump(),
            "workspace_min": (0.2, -0.6, table),
            "workspace_max": (0.95, 0.6, 1.2),
            "table_z": table,
            "cone_deg": 135.0,
            "tool_points_m": (),
            **settings,
        }
    )


def _envelope(settings: EnvelopeSettings) -> Envelope:
    env = Envelope(settings, kin.arm_kinematics, LIMITS, control_hz=15.0)
    env._first = False
    return env


def _state(q: np.ndarray) -> ArmState:
    tool = kin.forward(q)[2]
    pose = np.concatenate([tool[:3, 3], geo.matrix_to_quat(tool[:3, :3])])
    return ArmState(t=0.0, q=q.copy(), dq=np.zeros(7), ee_pose=pose)


# -- the played-out controller -------------------------------------------------
def _min_norm(j: np.ndarray, e: np.ndarray) -> np.ndarray:
    return kin.dls(j, e, damping=0.01)


def _joint3_held(j: np.ndarray, e: np.ndarray) -> np.ndarray:
    keep = [0, 1, 3, 4, 5, 6]
    dq = np.zeros(7)
    dq[keep] = kin.dls(j[:, keep], e, damping=0.01)
    return dq


RESOLUTIONS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "min-norm": _min_norm,
    "joint 3 held": _joint3_held,
}


class Lowest:
    """The lowest each part of the arm went, against the table plane."""

    def __init__(self, env: Envelope) -> None:
        self.env = env
        self.body = math.inf  # the elbow and the wrist
        self.tool = math.inf  # the tool point, fingertips and the gripper's points

    def see(self, q: np.ndarray) -> None:
        origins, _, tool = kin.forward(q)
        self.body = min(self.body, float(origins[list(kin.BODY_FRAMES), 2].min()))
        points = tool[:3, 3] + self.env.points @ tool[:3, :3].T
        tip = tool[2, 3] + self.env.settings.tcp_extra_m * tool[2, 2]
        self.tool = min(self.tool, float(tool[2, 3]), float(tip), *points[:, 2].tolist())

    def below_table(self) -> float:
        """How far (m) the lowest point went below the table's margin."""
        return self.env.table - min(self.body, self.tool)


def _track(
    q0: np.ndarray,
    pose_at: Callable[[float], tuple[np.ndarray, np.ndarray]],
    seconds: float,
    resolve: Callable[[np.ndarray, np.ndarray], np.ndarray],
    lowest: Lowest,
) -> np.ndarray:
    """Joints tracking the tool trajectory ``pose_at(t)`` every ``DT`` (two
    corrective steps a period, as franky-sim's Cartesian controller does
    several), held in the joint range; every period looked at."""
    q = q0.copy()
    for i in range(1, round(seconds / DT) + 1):
        p, r = pose_at(i * DT)
        for _ in range(2):
            k = kin.arm_kinematics(q)
            e = np.concatenate([p - k.tool[:3, 3], geo.rotation_error(r, k.tool[:3, :3])])
            q = np.clip(q + resolve(k.jacobian, e), LIMITS.q_min, LIMITS.q_max)
        lowest.see(q)
    return q


def _held_twist(state: ArmState, twist: np.ndarray) -> Callable[[float], tuple[Any, Any]]:
    """The tool's trajectory under a Cartesian velocity: held, then ramped to rest."""
    p0, r0 = state.ee_pose[:3], geo.quat_to_matrix(state.ee_pose[3:])

    def travelled(t: float) -> float:  # seconds of full twist by time t
        if t <= HOLD_S:
            return t
        u = min(t - HOLD_S, RAMP_S)
        return HOLD_S + u - u * u / (2 * RAMP_S)

    def pose_at(t: float) -> tuple[np.ndarray, np.ndarray]:
        s = travelled(t)
        return p0 + twist[:3] * s, _rot(twist[3:] * s) @ r0

    return pose_at


def _rot(v: np.ndarray) -> np.ndarray:
    angle = float(np.linalg.norm(v))
    if angle < 1e-12:
        return np.eye(3)
    k = v / angle
    kx = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(angle) * kx + (1 - math.cos(angle)) * (kx @ kx)


def _straight(state: ArmState, target: np.ndarray, seconds: float) -> Callable[..., Any]:
    """The tool's trajectory to a pose target: the straight line and the
    rotation about one axis, smoothly in ``seconds``."""
    p0, r0 = state.ee_pose[:3], geo.quat_to_matrix(state.ee_pose[3:])
    p1, turn = target[:3], geo.rotation_error(geo.quat_to_matrix(target[3:]), r0)

    def pose_at(t: float) -> tuple[np.ndarray, np.ndarray]:
        u = min(1.0, t / seconds)
        s = u * u * (3 - 2 * u)
        return p0 + (p1 - p0) * s, _rot(turn * s) @ r0

    return pose_at


def _play_twist(env: Envelope, q0: np.ndarray, twist: np.ndarray, resolve: Any) -> Lowest:
    lowest = Lowest(env)
    lowest.see(q0)
    _track(q0, _held_twist(_state(q0), twist), HOLD_S + RAMP_S, resolve, lowest)
    return lowest


def _play_pose(env: Envelope, q0: np.ndarray, target: np.ndarray, resolve: Any) -> Lowest:
    lowest = Lowest(env)
    lowest.see(q0)
    _track(q0, _straight(_state(q0), target, 0.4), 0.45, resolve, lowest)
    return lowest


# -- the tests ----------------------------------------------------------------
DOWN = np.array([0.0, 0.0, -0.25, 0.0, 0.0, 0.0])  # at the cap, straight down
OUTWARD = np.array([0.25, 0.0, 0.0, 0.0, 0.0, 0.0])


def test_the_scene_sinks_the_elbow_while_the_tool_stays_up() -> None:
    """The premise, played out without the envelope: straight down at the cap
    for one command takes the wrist through the table under either
    resolution, while the tool stays above it."""
    env = _envelope(_scene(UPTURNED_Q))
    for name, resolve in RESOLUTIONS.items():
        lowest = _play_twist(env, UPTURNED_Q, DOWN, resolve)
        assert lowest.body < env.settings.table_z - 0.005, (name, lowest.body)
        assert lowest.tool > env.table + 0.01, (name, lowest.tool)


def test_a_cartesian_velocity_that_would_sink_the_wrist_is_held() -> None:
    env = _envelope(_scene(UPTURNED_Q))
    state = _state(UPTURNED_Q)
    guarded = env.guard(ArmCommand(ArmCommandKind.cartesian_velocity, DOWN), state)
    assert EnvelopeReason.workspace in guarded.reasons
    assert guarded.note is not None and "wrist" in guarded.note, guarded.note
    sent = guarded.command.target
    # held along its own direction, to a part of it
    assert DOWN[2] < sent[2] <= 0.0 and np.allclose(sent[[0, 1, 3, 4, 5]], 0.0)
    # the tool's own checks would have let all of it through: the tool ends
    # far above the table
    assert state.ee_pose[2] + DOWN[2] * env.horizon > env.table + 0.02
    for name, resolve in RESOLUTIONS.items():
        lowest = _play_twist(env, UPTURNED_Q, sent, resolve)
        assert lowest.below_table() <= TOL_M, (name, lowest.body)
    # the note names the point and its predicted height, and reaches the log's run
    assert "z = " in guarded.note and env.log.runs[-1].note == guarded.note


def test_a_cartesian_pose_that_would_sink_the_wrist_is_held() -> None:
    env = _envelope(_scene(UPTURNED_Q, max_step_m=0.08))
    state = _state(UPTURNED_Q)
    target = state.ee_pose.copy()
    target[2] -= 0.08  # one (long) step straight down
    guarded = env.guard(ArmCommand(ArmCommandKind.cartesian_pose, target), state)
    assert EnvelopeReason.workspace in guarded.reasons
    assert guarded.note is not None and "wrist" in guarded.note
    sent = guarded.command.target
    assert target[2] < sent[2] <= state.ee_pose[2] and np.allclose(sent[:2], target[:2])
    for name, resolve in RESOLUTIONS.items():
        asked = _play_pose(env, UPTURNED_Q, target, resolve)
        assert asked.body < env.settings.table_z, (name, asked.body)  # the premise
        lowest = _play_pose(env, UPTURNED_Q, sent, resolve)
        assert lowest.below_table() <= TOL_M, (name, lowest.body)


def test_benign_cartesian_commands_pass_as_asked() -> None:
    """At home over the default cell, and in the upturned scene moving up or
    sideways: sent bit for bit."""
    env = _envelope(EnvelopeSettings())
    home = _state(HOME_Q)
    for twist in (
        OUTWARD,
        np.array([-0.1, 0.0, 0.0, 0.0, 0.0, 0.0]),
        np.array([0.0, 0.2, -0.1, 0.0, 0.0, 0.5]),
        np.array([0.1, -0.1, -0.2, 0.3, 0.0, 0.0]),
    ):
        guarded = env.guard(ArmCommand(ArmCommandKind.cartesian_velocity, twist), home)
        assert not guarded.reasons and guarded.command.target is twist
    target = home.ee_pose.copy()
    target[:3] += [0.03, -0.02, -0.03]
    guarded = env.guard(ArmCommand(ArmCommandKind.cartesian_pose, target), home)
    assert not guarded.reasons
    bench = _envelope(_scene(UPTURNED_Q))
    for twist in (-DOWN, np.array([-0.1, 0.1, 0.05, 0.0, 0.0, 0.2])):
        guarded = bench.guard(
            ArmCommand(ArmCommandKind.cartesian_velocity, twist), _state(UPTURNED_Q)
        )
        assert not guarded.reasons, guarded.note


def _random_start(rng: np.random.Generator, around: np.ndarray = UPTURNED_Q) -> np.ndarray:
    """An arm near ``around``, every joint turned by up to 0.3 rad."""
    q = around + rng.uniform(-0.3, 0.3, 7)
    return np.clip(q, LIMITS.q_min + 0.05, LIMITS.q_max - 0.05)


def _random_commands(n: int, seed: int) -> list[tuple[np.ndarray, str, np.ndarray, float]]:
    """(start, kind, command, body clearance) for random hostile Cartesian
    commands: mostly down at the cap, turning."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        q = _random_start(rng)
        above = float(rng.uniform(0.0, 0.06))
        v = np.array([rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5), rng.uniform(-1.0, 0.2)])
        v *= 0.25 / np.linalg.norm(v)
        w = rng.normal(size=3) * 0.3
        if rng.uniform() < 0.5:
            out.append((q, "velocity", np.concatenate([v, w]), above))
        else:
            s = _state(q)
            target = s.ee_pose.copy()
            target[:3] += v / 0.25 * 0.05
            target[3:] = geo.matrix_to_quat(_rot(w * 0.3) @ geo.quat_to_matrix(s.ee_pose[3:]))
            out.append((q, "pose", target, above))
    return out


def _hostile_tally(check: bool, n: int = 40) -> tuple[int, int, float]:
    """Of ``n`` random hostile Cartesian commands, each guarded and played
    out under both resolutions: how many put a point of the arm below the
    table's margin (beyond the tracking tolerance), how many of those the
    tool itself, and the deepest (m)."""
    reached = tool_reached = 0
    deepest = 0.0
    for q, kind, command, above in _random_commands(n, seed=11):
        env = _envelope(_scene(q, above_floor=above))
        if not check:
            env._cartesian_body = lambda *a, **k: 1.0  # type: ignore[method-assign]
        start = _state(q)
        if env._excess_k(kin.arm_kinematics(q)).box > 0:
            continue  # the start itself outside the box: not this test's subject
        kind_ = (
            ArmCommandKind.cartesian_velocity
            if kind == "velocity"
            else ArmCommandKind.cartesian_pose
        )
        sent = env.guard(ArmCommand(kind_, command), start).command.target
        worst = -math.inf
        tool_worst = -math.inf
        for resolve in RESOLUTIONS.values():
            if kind == "velocity":
                lowest = _play_twist(env, q, sent, resolve)
            else:
                lowest = _play_pose(env, q, sent, resolve)
            worst = max(worst, lowest.below_table())
            tool_worst = max(tool_worst, env.table - lowest.tool)
        if worst > TOL_M:
            reached += 1
            deepest = max(deepest, worst)
        tool_reached += tool_worst > TOL_M
    return reached, tool_reached, deepest


@pytest.mark.parametrize("check", [False, True], ids=["without the check", "with the check"])
def test_random_hostile_cartesian_commands_keep_the_body_above_the_table(check: bool) -> None:
    """40 random Cartesian commands (velocities at the cap and one-step pose
    targets, mostly down, turning) from random upturned starts with the
    elbow and wrist 0–6 cm above the envelope's floor: without the body
    check some of them take the wrist through the table while the tool
    stays above it; with it none, under either resolution of the arm's
    redundancy."""
    reached, tool_reached, deepest = _hostile_tally(check)
    print(f"check={check}: {reached} of 40 below the table, deepest {deepest * 1000:.1f} mm")
    assert tool_reached == 0  # the tool's own checks hold either way
    if check:
        assert reached == 0
    else:
        assert reached >= 3


def test_the_margin_covers_the_other_resolution() -> None:
    """``cartesian_body_margin_m`` is the spread between the prediction
    (minimum norm) and the joint-3-held resolution over one command's
    travel: the elbow's and wrist's heights after the same tool motion,
    from random reaches, differ by less than it."""
    rng = np.random.default_rng(12)
    margin = EnvelopeSettings().cartesian_body_margin_m
    spread = 0.0
    for i in range(40):
        q = _random_start(rng, UPTURNED_Q if i % 2 else HOME_Q)
        v = rng.normal(size=3)
        twist = np.concatenate([v * 0.25 / np.linalg.norm(v), rng.normal(size=3) * 0.3])
        ends = []
        for resolve in RESOLUTIONS.values():
            q1 = _track(
                q, _held_twist(_state(q), twist), 0.4, resolve, Lowest(_envelope(_scene(q)))
            )
            ends.append(kin.arm_kinematics(q1).body[:, 2])
        spread = max(spread, float(np.max(np.abs(ends[0] - ends[1]))))
    print(f"elbow/wrist height spread between resolutions: {spread * 1000:.1f} mm")
    assert spread < margin


def test_the_watch_stops_a_measured_wrist_below_the_table() -> None:
    """The prediction is checked against what the arm did: a controller that
    resolves its redundancy otherwise may leave the wrist lower than
    predicted, command after command; the MEASURED elbow and wrist below the
    table's margin by more than the watch tolerates end the episode."""
    tolerance = EnvelopeSettings().watch_tolerance_m
    margin = EnvelopeSettings().cartesian_body_margin_m
    # the table put so that the wrist at UPTURNED_Q is 2 cm below its margin
    # (the tool point stays above it, the tool turned up: only the body is low)
    low = _envelope(_scene(UPTURNED_Q, above_floor=-(margin + tolerance + 0.01)))
    why = low.watch(_state(UPTURNED_Q))
    assert why is not None and "wrist" in why and "below the table" in why
    # where the predicted body may be (above its floor), the watch is quiet
    assert _envelope(_scene(UPTURNED_Q)).watch(_state(UPTURNED_Q)) is None


def test_a_twist_past_half_a_turn_is_checked_along_its_own_rotation() -> None:
    """A velocity command held for the horizon may turn more than π; its path
    is that turn, not the shorter way round to the same end orientation. On
    an arm without a body model the gripper's points are still walked."""
    settings = _scene(UPTURNED_Q, velocity_horizon_s=3.0, max_tool_rotation_speed=2.5)
    env = Envelope(settings, lambda q: None, LIMITS, control_hz=15.0)  # no body model
    seen: list[np.ndarray] = []
    real = env._tool_low

    def spy(p: np.ndarray, r: np.ndarray) -> tuple[float, str]:
        seen.append(r.copy())
        return real(p, r)

    env._tool_low = spy  # type: ignore[method-assign]
    h = env.horizon
    w = np.array([0.0, 0.0, 1.0]) * 0.9 * env.spin_cap  # about the vertical
    assert float(np.linalg.norm(w)) * h > math.pi  # the case: more than half a turn
    state = _state(UPTURNED_Q)
    p0, r0 = state.ee_pose[:3], geo.quat_to_matrix(state.ee_pose[3:])
    r1 = _rotvec_matrix(w * h) @ r0
    done = env._cartesian_body(UPTURNED_Q, p0, r0, p0, r1, set(), turn=w * h)
    assert done == 1.0  # a turn about the vertical keeps the fingertips' height
    turned = [float(np.linalg.norm(geo.rotation_error(r, r0))) for r in seen]
    # the walk went the long way, through half a turn (the short way round to
    # the same end turns by 2π − |w|·h, under π/2 here)
    assert max(turned) > math.pi - 0.1
