"""Checks on a homing path that both arms (``FrankyArm``, ``SimArm``) run
before they move: homing lifts the tool, goes across to the home pose, then
sets the joints to ``home_q``; the two last moves need these.

- **The final joint move.** The "across" pose and ``home_q`` share the tool's
  pose but not necessarily the arm's configuration (the elbow), and a
  straight line in joint space between two configurations does not keep the
  tool still: it can sweep the fingers down into a tote. So before the move
  the tool's height is computed by forward kinematics along that line, in
  steps of at most ``JOINT_LINE_STEP_RAD`` on any joint, and the move is
  refused if any point falls below its floor (``check_joint_line``).
- **The wrist's turn during "across".** A stop can leave the tool turned far
  from home's orientation; one Cartesian move through a large turn can drive
  joint 7 into its limit, and would again on every retry. The turn is done in
  stages of at most ``WRIST_TURN_BOUND_RAD``, and before each stage the joint
  7 it would end at is estimated from the measured state: beyond its limits,
  homing is refused, naming it, and the operator turns the wrist back by hand
  (``wrist_stages``, ``check_wrist_turn``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from proctor.core.geometry import quat_to_matrix, rotation_error
from proctor.station.drivers.arm.base import ArmFault

# The largest turn of the tool in one homing move. A quarter turn: the
# estimate of where joint 7 ends (below) is first-order, and re-made from the
# measured joints before each stage, so its error is bounded by one stage's
# turn; a quarter turn also keeps each stage far from the half-turn, where the
# shortest rotation (which a Cartesian move takes) flips direction with noise.
# An episode's tilt is held to the envelope's 45° cone, so a turn beyond a
# quarter is mostly a yaw of the wrist, which is what joint 7 does.
WRIST_TURN_BOUND_RAD = math.pi / 2
# sampling of the final joint move: no joint moves more than this between two
# checked points (the envelope's own path step, proctor.station.control.envelope)
JOINT_LINE_STEP_RAD = 0.05


def joint_line(
    q_from: np.ndarray, q_to: np.ndarray, step: float = JOINT_LINE_STEP_RAD
) -> list[tuple[float, np.ndarray]]:
    """The points of the straight joint-space line, ends included, no joint
    moving more than ``step`` between two of them."""
    a, b = np.asarray(q_from, dtype=np.float64), np.asarray(q_to, dtype=np.float64)
    n = max(1, math.ceil(float(np.max(np.abs(b - a))) / step))
    return [(k / n, a + (b - a) * (k / n)) for k in range(n + 1)]


def check_joint_line(
    tool_z: Callable[[np.ndarray], float],
    q_from: np.ndarray,
    q_to: np.ndarray,
    floor_z: float,
) -> float:
    """Refuse (``ArmFault``) the joint move ``q_from`` → ``q_to`` if the tool,
    by ``tool_z`` (forward kinematics), dips below ``floor_z`` anywhere along
    it; returns the lowest height it reaches."""
    lowest, at = math.inf, 0.0
    for s, q in joint_line(q_from, q_to):
        z = float(tool_z(q))
        if z < lowest:
            lowest, at = z, s
    if lowest < floor_z:
        raise ArmFault(
            f"homing: the final joint move to home_q would take the tool down to "
            f"z = {lowest:.3f} m ({at:.0%} of the way), below the clearance floor "
            f"z = {floor_z:.3f} m; not moving (hand-guide the arm nearer home and home again)"
        )
    return lowest


def turn_to(quat_now: np.ndarray, quat_home: np.ndarray) -> np.ndarray:
    """The shortest turn from ``quat_now`` to ``quat_home`` as a rotation
    vector in the tool's own frame (its z component is a turn about the
    tool's z axis: joint 7's axis, the TCP being on the flange's axis)."""
    r_now, r_home = quat_to_matrix(quat_now), quat_to_matrix(quat_home)
    return r_now.T @ rotation_error(r_home, r_now)


def wrist_stages(quat_now: np.ndarray, quat_home: np.ndarray) -> int:
    """How many moves the turn to home's orientation takes, none turning
    more than ``WRIST_TURN_BOUND_RAD``."""
    angle = float(np.linalg.norm(turn_to(quat_now, quat_home)))
    return max(1, math.ceil(angle / WRIST_TURN_BOUND_RAD - 1e-9))


def check_wrist_turn(
    quat_now: np.ndarray, quat_home: np.ndarray, q7: float, q7_min: float, q7_max: float
) -> float:
    """Refuse (``ArmFault``) a turn to home's orientation that would take
    joint 7 outside ``[q7_min, q7_max]``: estimated as the measured ``q7``
    plus the turn about the tool's z axis (exact when only joint 7 moves and
    the TCP's rotation is about the flange's z; first order otherwise).
    Returns that estimate."""
    turn = turn_to(quat_now, quat_home)
    end = q7 + float(turn[2])
    if not q7_min <= end <= q7_max:
        raise ArmFault(
            f"homing: turning the wrist {math.degrees(float(np.linalg.norm(turn))):.0f}° to "
            f"home's orientation would take joint 7 to about {end:.2f} rad, outside its limits "
            f"[{q7_min:.2f}, {q7_max:.2f}]; not moving across (turn the wrist back by hand "
            "and home again)"
        )
    return end


def slerp(q0: np.ndarray, q1: np.ndarray, s: float) -> np.ndarray:
    """The unit quaternion ``s`` of the way along the shortest arc from q0 to
    q1, on q1's side of the sphere: at ``s = 1`` it is q1 itself, sign
    included (a homing move's target is the home quaternion exactly; franky's
    planner failed on its negative, the same rotation, on franky-sim)."""
    a = np.asarray(q0, dtype=np.float64) / np.linalg.norm(q0)
    b = np.asarray(q1, dtype=np.float64) / np.linalg.norm(q1)
    dot = float(a @ b)
    if dot < 0.0:
        a, dot = -a, -dot
    if dot > 0.9995:
        out = a + s * (b - a)
        return out / np.linalg.norm(out)
    theta = math.acos(dot)
    return (math.sin((1 - s) * theta) * a + math.sin(s * theta) * b) / math.sin(theta)
