"""The checks homing runs before its last two moves (``drivers.arm.homing``;
second hardware review #8), on the simulated cell's FR3 model: the final
joint move's line in joint space, and the wrist's turn during "across"."""

from __future__ import annotations

import math

import numpy as np
import pytest

from proctor.core.geometry import matrix_to_quat
from proctor.station.drivers.arm.base import ArmFault
from proctor.station.drivers.arm.homing import (
    WRIST_TURN_BOUND_RAD,
    check_joint_line,
    check_wrist_turn,
    joint_line,
    slerp,
    wrist_stages,
)
from proctor.station.sim import kinematics as kin
from proctor.station.sim.world import Q_MAX, Q_MIN

HOME = np.array((0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785))
# the same tool pose as HOME (to 0.3 mm) on the arm's other branch (found by
# IK from a random seed): the straight joint line between the two swings the
# tool down to z ≈ 0.19 m although both ends are at z ≈ 0.43 m
OTHER_BRANCH = np.array((2.7343, 0.8224, -2.8833, -2.3504, 0.1883, 1.5453, 0.5604))


def tool_z(q: np.ndarray) -> float:
    return float(kin.forward(q)[2][2, 3])


def quat(q: np.ndarray) -> np.ndarray:
    return matrix_to_quat(kin.forward(q)[2][:3, :3])


def test_the_line_is_sampled_finely_ends_included() -> None:
    points = joint_line(HOME, OTHER_BRANCH)
    np.testing.assert_allclose(points[0][1], HOME)
    np.testing.assert_allclose(points[-1][1], OTHER_BRANCH)
    steps = np.diff(np.array([q for _, q in points]), axis=0)
    assert np.max(np.abs(steps)) <= 0.05 + 1e-12


def test_a_final_joint_move_that_sweeps_the_tool_down_is_refused() -> None:
    """Both ends share the tool's pose above the clearance; the move between
    them would not keep it there, and is refused naming the depth."""
    assert np.linalg.norm(kin.forward(OTHER_BRANCH)[2][:3, 3] - kin.forward(HOME)[2][:3, 3]) < 1e-3
    assert min(tool_z(HOME), tool_z(OTHER_BRANCH)) > 0.42
    with pytest.raises(ArmFault, match=r"final joint move to home_q .* z = 0\.1\d\d m .* 0\.280"):
        check_joint_line(tool_z, OTHER_BRANCH, HOME, floor_z=0.28)


def test_a_final_joint_move_that_keeps_the_tool_up_passes() -> None:
    near = HOME + np.array([0.05, -0.04, 0.03, 0.05, -0.05, 0.04, 0.3])
    lowest = check_joint_line(tool_z, near, HOME, floor_z=0.28)
    assert lowest > 0.4


def test_the_wrist_turn_is_joint_7_when_only_joint_7_moves() -> None:
    """The estimate of where joint 7 ends is exact for a pure joint-7 offset."""
    for offset in (-1.2, -0.3, 0.4, 1.4):
        turned = HOME.copy()
        turned[6] += offset
        end = check_wrist_turn(quat(turned), quat(HOME), turned[6], Q_MIN[6], Q_MAX[6])
        assert end == pytest.approx(HOME[6], abs=1e-6)


def test_a_wrist_turn_that_would_pass_joint_7s_limit_is_refused() -> None:
    """A stop left joint 7 3.5 rad from home's: the shortest turn to home's
    orientation (the one a Cartesian move takes) is 2.78 rad the other way,
    which would drive joint 7 to about −5.5 rad; refused, naming it."""
    turned = HOME.copy()
    turned[6] -= 3.5
    assert Q_MIN[6] < turned[6]
    with pytest.raises(ArmFault, match=r"joint 7 to about -5\.50 rad, outside its limits"):
        check_wrist_turn(quat(turned), quat(HOME), turned[6], Q_MIN[6], Q_MAX[6])


def test_a_large_turn_goes_in_stages_of_at_most_a_quarter_turn() -> None:
    assert math.isclose(WRIST_TURN_BOUND_RAD, math.pi / 2)
    for offset, stages in ((0.0, 1), (1.0, 1), (math.pi / 2, 1), (2.0, 2), (3.0, 2)):
        turned = HOME.copy()
        turned[6] += offset
        assert wrist_stages(quat(turned), quat(HOME)) == stages
    a, b = quat(HOME), quat(HOME + np.array([0, 0, 0, 0, 0, 0, 3.0]))
    mid = slerp(a, b, 0.5)
    half = quat(HOME + np.array([0, 0, 0, 0, 0, 0, 1.5]))
    assert min(np.linalg.norm(mid - half), np.linalg.norm(mid + half)) < 1e-9
    # the last stage's target is the home quaternion itself, sign included
    # (franky's planner failed on its negative on franky-sim)
    np.testing.assert_allclose(slerp(a, -b, 1.0), -b, atol=1e-12)
    np.testing.assert_allclose(slerp(-a, b, 1.0), b, atol=1e-12)
