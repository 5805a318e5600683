"""The simulated 2F-85: true finger physics in the world, and what the driver
reports of it — polled at ≈ 50 Hz, a few milliseconds late, in 1/255 steps,
the object flag after a stall — so that the annotator's timing is measured
against something it cannot read off the signal."""

from __future__ import annotations

import numpy as np
import pytest

from proctor.core.clock import VirtualClock
from proctor.core.domain import Side
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind
from proctor.station.drivers.gripper.base import GripperCommand
from proctor.station.sim.arm import SimArm
from proctor.station.sim.gripper import SimGripper
from proctor.station.sim.objects import OBJECTS
from proctor.station.sim.world import SimWorld

DOWN = np.array([1.0, 0.0, 0.0, 0.0])
RATE = 1.0 / 0.57  # finger travel per second at full speed (85 mm at 150 mm/s)


def _pick_and_place(object_name: str, seed: int) -> tuple[SimWorld, SimGripper, list[tuple]]:
    """Grasp item 0, lift, open over the source bin; telemetry-like reads at 100 Hz:
    (t, true position, reported position, reported object flag, report time)."""
    clock = VirtualClock()
    world = SimWorld(clock)
    arm, grip = SimArm(world), SimGripper(world)
    arm.connect()
    grip.connect()
    grip.activate()
    world.reset_scene(object_name, 1, Side.left, Side.right, seed)
    x, y, z = world.items[0].pos
    for xyz in ([x, y, 0.15], [x, y, z]):
        arm.send(ArmCommand(ArmCommandKind.cartesian_pose, np.array([*xyz, *DOWN])))
        clock.advance(2.0)
    rows: list[tuple] = []

    def read(seconds: float) -> None:
        for _ in range(round(seconds * 100)):
            clock.advance(0.01)
            s = grip.read_state()
            rows.append(
                (world.t, world.finger_position_at(world.t), s.position, s.object_detected, s.t)
            )

    grip.send(GripperCommand(1.0))
    read(1.0)
    arm.send(ArmCommand(ArmCommandKind.cartesian_pose, np.array([x, y, 0.12, *DOWN])))
    read(1.0)
    grip.send(GripperCommand(0.0))
    read(0.8)
    return world, grip, rows


@pytest.mark.parametrize("object_name", ["towels", "batteries"])
def test_the_reported_signals_are_a_polled_2f85s(object_name: str) -> None:
    world, _, rows = _pick_and_place(object_name, seed=3)
    t, true, reported, flag, t_report = (np.array(c) for c in zip(*rows, strict=True))
    truth = world.ground_truth()
    kinds = [e["kind"] for e in truth["events"]]
    assert kinds[:2] == ["grasp", "release"], kinds
    spec = OBJECTS[object_name]

    # 8-bit: every reported position is a whole number of 1/255 steps
    np.testing.assert_allclose(reported * 255, np.round(reported * 255), atol=1e-9)
    # polled: while the fingers move, the report changes on ≈ 50 Hz polls, not every sample
    moving = np.abs(np.diff(true)) > 1e-6
    changes = np.abs(np.diff(reported)) > 1e-9
    assert changes[moving].mean() < 0.7
    # late: each report is 0–30 ms old, and at most 30 ms behind the fingers' true path
    age = t - t_report
    assert age.min() >= 0 and age.max() <= 0.03
    lag_in_travel = np.abs(reported - true)
    assert lag_in_travel.max() <= 0.03 * RATE + 1 / 255
    assert lag_in_travel.max() > 2 / 255  # but it does lag

    # the fingers squeeze the item past its width, and stall there
    hold = reported[(t > t[0] + 0.8) & (t < t[0] + 1.8)]
    assert np.ptp(hold) == 0
    assert hold[0] == pytest.approx(spec.hold_position + spec.squeeze, abs=1 / 255)
    # the object flag comes ≥ 30 ms after the stall, and goes with the open command
    t_flag = t[np.argmax(flag)]
    t_stall = t[np.argmax(true >= spec.hold_position + spec.squeeze - 1e-9)]
    assert 0.03 <= t_flag - t_stall <= 0.03 + 0.035
    t_open = t[0] + 2.0
    assert not flag[t > t_open + 0.01].any()

    # the item leaves the fingers once they opened past its width by the grasp's
    # margin: later than the open command, off the 10 ms physics grid
    grasp = next(e for e in truth["events"] if e["kind"] == "grasp")
    release = next(e for e in truth["events"] if e["kind"] == "release")
    free_below = grasp["details"]["free_below"]
    assert spec.hold_position - spec.release_clearance <= free_below < spec.hold_position
    depth = spec.hold_position + spec.squeeze - free_below
    assert release["t"] - t_open == pytest.approx(depth / RATE, abs=0.011)
    assert abs(release["t"] * 100 - round(release["t"] * 100)) > 1e-3
    # so the reported signal shows no step at the release instant
    assert world.finger_position_at(release["t"]) == pytest.approx(free_below, abs=1e-4)


def test_the_same_seed_reports_the_same_signals() -> None:
    a = _pick_and_place("spoons", seed=5)[2]
    b = _pick_and_place("spoons", seed=5)[2]
    assert a == b
    c = _pick_and_place("spoons", seed=6)[2]
    assert [r[2:] for r in a] != [r[2:] for r in c]
