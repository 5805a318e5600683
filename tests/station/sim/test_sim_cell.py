"""The simulated cell's physics, kinematics and rendering."""

from __future__ import annotations

import math

import numpy as np
import pytest

from proctor.core import geometry
from proctor.core.clock import VirtualClock
from proctor.core.domain import Side
from proctor.policywire.wire import keys
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind, ArmFault
from proctor.station.drivers.gripper.base import GripperCommand
from proctor.station.sim import kinematics as kin
from proctor.station.sim.arm import SimArm
from proctor.station.sim.gripper import SimGripper
from proctor.station.sim.render import render_exterior, render_wrist
from proctor.station.sim.world import HOME_Q, SimWorld

DOWN = np.array([1.0, 0.0, 0.0, 0.0])


def test_forward_kinematics_at_home_matches_the_published_frame() -> None:
    # Franka's home (0, -π/4, 0, -3π/4, 0, π/2, π/4): flange 0.088 m ahead of the
    # shoulder axis line plus joint-4/5 offsets, pointing straight down
    _, _, tool = kin.forward(HOME_Q)
    assert tool[:3, 3] == pytest.approx([0.3069, 0.0, 0.4304], abs=2e-3)
    np.testing.assert_allclose(tool[:3, :3], np.diag([1.0, -1.0, -1.0]), atol=2e-3)


def test_jacobian_matches_finite_differences() -> None:
    rng = np.random.default_rng(3)
    q = HOME_Q + rng.normal(0, 0.3, 7)
    origins, axes, tool = kin.forward(q)
    jac = kin.jacobian(origins, axes)
    eps = 1e-6
    for i in range(7):
        dq = np.zeros(7)
        dq[i] = eps
        p2 = kin.forward(q + dq)[2][:3, 3]
        np.testing.assert_allclose((p2 - tool[:3, 3]) / eps, jac[:3, i], atol=1e-5)


def test_rotation_conversions_round_trip() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        rpy = rng.uniform([-math.pi, -1.4, -math.pi], [math.pi, 1.4, math.pi])
        r = geometry.euler_to_matrix(rpy)
        np.testing.assert_allclose(geometry.matrix_to_euler(r), rpy, atol=1e-9)
        np.testing.assert_allclose(
            geometry.quat_to_matrix(geometry.matrix_to_quat(r)), r, atol=1e-9
        )
        err = geometry.rotation_error(r, np.eye(3))
        assert np.linalg.norm(err) == pytest.approx(
            math.acos(max(-1, min(1, (np.trace(r) - 1) / 2))), abs=1e-7
        )


def _world(seed: int = 1) -> tuple[VirtualClock, SimWorld, SimArm, SimGripper]:
    clock = VirtualClock()
    world = SimWorld(clock)
    arm, grip = SimArm(world), SimGripper(world)
    arm.connect()
    grip.connect()
    grip.activate()
    world.reset_scene("towels", 3, Side.left, Side.right, seed)
    return clock, world, arm, grip


def _go(clock: VirtualClock, arm: SimArm, xyz: list[float], seconds: float = 2.0) -> None:
    arm.send(ArmCommand(ArmCommandKind.cartesian_pose, np.array([*xyz, *DOWN])))
    clock.advance(seconds)
    arm.world.sync()  # the world advances lazily, on access


def test_pick_carry_and_place_is_ground_truth() -> None:
    clock, world, arm, grip = _world()
    item = world.items[0]
    x, y, z = item.pos
    _go(clock, arm, [x, y, 0.15])
    _go(clock, arm, [x, y, z])
    grip.send(GripperCommand(1.0))
    clock.advance(1.0)
    world.sync()
    state = grip.read_state()
    assert state.object_detected and 0.7 < state.position < 0.9  # stopped on the towel
    assert world.items[0].state == keys.ItemState.held
    target = world.layout.target
    _go(clock, arm, [x, y, 0.15])
    _go(clock, arm, [target.cx, target.cy, 0.15])
    # the item travelled with the fingers
    assert np.linalg.norm(world.items[0].pos[:2] - [target.cx, target.cy]) < 0.01
    t_open = clock.now()
    grip.send(GripperCommand(0.0))
    clock.advance(1.0)
    world.sync()
    truth = world.ground_truth()
    assert truth["final"]["placed"] == 1 and truth["final"]["source"] == 2
    assert len(truth["placements_s"]) == 1
    # the fingers let go within a gripper stroke of the open command
    assert t_open <= truth["t_start"] + truth["placements_s"][0] <= t_open + 0.6
    kinds = [e["kind"] for e in truth["events"]]
    assert kinds == ["grasp", "release", "placed"]


def test_the_same_seed_gives_the_same_world() -> None:
    a, b = _world(7)[1], _world(7)[1]
    np.testing.assert_array_equal(a.items_array(), b.items_array())
    c = _world(8)[1]
    assert not np.array_equal(a.items_array(), c.items_array())


def test_fast_contact_with_a_wall_is_a_reflex_slow_contact_is_blocked() -> None:
    clock, world, arm, _ = _world()
    b = world.layout.source
    wall_y = b.cy + b.half_y + b.wall / 2
    _go(clock, arm, [b.cx, wall_y, 0.2])
    # slowly down onto the rim: blocked, no error
    world.params = type(world.params)(v_max=0.1)
    _go(clock, arm, [b.cx, wall_y, 0.0], seconds=3.0)
    state = arm.read_state()
    assert state.error is None and state.ee_pose[2] > b.height - 0.01
    # fast down onto it: a collision reflex, and the arm refuses commands until recovered
    world.params = type(world.params)()
    _go(clock, arm, [b.cx, wall_y, 0.2])
    _go(clock, arm, [b.cx, wall_y, 0.0], seconds=2.0)
    state = arm.read_state()
    assert state.error is not None and "source bin wall" in state.error
    with pytest.raises(ArmFault, match="recover first"):
        arm.send(ArmCommand(ArmCommandKind.cartesian_pose, np.array([0.4, 0, 0.3, *DOWN])))
    arm.recover()
    assert arm.read_state().error is None
    assert any(e["kind"] == "contact" for e in world.ground_truth()["events"])


def test_a_throw_outside_the_workspace_is_lost() -> None:
    clock, world, arm, grip = _world()
    x, y, z = world.items[1].pos
    _go(clock, arm, [x, y, 0.15])
    _go(clock, arm, [x, y, z])
    grip.send(GripperCommand(1.0))
    clock.advance(1.0)
    world.sync()
    assert world.held == 1
    _go(clock, arm, [x, y, 0.25])
    _go(clock, arm, [0.45, -0.5, 0.3], seconds=2.0)  # far outside the reach zone (y < -0.45)
    grip.send(GripperCommand(0.0))
    clock.advance(1.0)
    world.sync()
    assert world.ground_truth()["final"]["lost"] == 1


def test_joint_commands_are_clipped_to_the_limits() -> None:
    _, _, arm, _ = _world()
    sent = arm.send(ArmCommand(ArmCommandKind.joint_position, np.full(7, 10.0)))
    assert np.all(sent.target <= np.array(arm.config.q_max))
    assert sent.target[0] == arm.config.q_max[0]


def test_renders_follow_the_spatial_configuration() -> None:
    images = {}
    for tote in Side:
        for cam in Side:
            clock = VirtualClock()
            world = SimWorld(clock)
            world.reset_scene("spoons", 8, tote, cam, 2)
            snap = world.snapshot(0)
            images[(tote, cam)] = render_exterior(snap, 160, 120)
            assert images[(tote, cam)].shape == (120, 160, 3)
            assert render_wrist(snap, 160, 120).shape == (120, 160, 3)
    views = list(images.values())
    # four configurations, four different pictures
    for i in range(4):
        for j in range(i + 1, 4):
            assert np.abs(views[i].astype(int) - views[j].astype(int)).sum() > 1000
