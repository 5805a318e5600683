"""The control loop's parts on their own: telemetry rows written through the
named column slices, the tick schedule's catch-up on a real-time clock, and
where chunk playback starts. Whole episodes through the loop are in
test_episode_runs.py, test_policy_pacing.py, test_faults.py and
test_positronic.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from proctor.core.recording import keys
from proctor.policywire.client import Reply
from proctor.policywire.wire.spec import ActionSpace
from proctor.station.config import EnvelopeSettings
from proctor.station.control.commands import StepCommands
from proctor.station.control.playback import ChunkPlayer
from proctor.station.control.sampling import TelemetrySampler, TelemetryTicks
from proctor.station.control.schedule import Schedule
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind, ArmState
from proctor.station.drivers.gripper.base import GripperCommand, GripperState
from proctor.station.envelope import Envelope, envelope_settings
from proctor.station.profiles import build_cell
from proctor.station.recorder import Recorder, read_segments
from tests.station.conftest import sim_config


def test_the_float_slices_name_every_float_column_once_in_order() -> None:
    spans = [
        (keys.SLICE_JOINT_POSITION, keys.JOINT_POSITION),
        (keys.SLICE_JOINT_VELOCITY, keys.JOINT_VELOCITY),
        (keys.SLICE_EE_POSE, keys.EE_POSE),
        (keys.SLICE_ACTION_REQUESTED, keys.ACTION_REQUESTED),
        (keys.SLICE_ACTION_SENT, keys.ACTION_SENT),
    ]
    for span, names in spans:
        assert keys.TELEMETRY_FLOAT_COLUMNS[span] == names
    singles = [keys.EE_SPEED, keys.GRIPPER_TARGET_REQUESTED, keys.GRIPPER_TARGET]
    singles += [keys.GRIPPER_POSITION, keys.POLICY_LATENCY, keys.ENVELOPE]
    covered = sorted(
        [i for span, _ in spans for i in range(span.start, span.stop)]
        + [keys.FLOAT_INDEX[name] for name in singles]
    )
    assert covered == list(range(len(keys.TELEMETRY_FLOAT_COLUMNS)))


def _arm(t: float, x: float) -> ArmState:
    q = np.arange(7) * 0.1
    return ArmState(t=t, q=q, dq=-q, ee_pose=np.array([x, 0.2, 0.3, 0.0, 1.0, 0.0, 0.0]))


def _gripper(t: float) -> GripperState:
    return GripperState(t=t, target=0.6, position=0.4, object_detected=True, activated=True)


def test_a_sample_lands_in_the_columns_keys_names(tmp_path: Path) -> None:
    """Every value read back by its column name; a 6-wide command is NaN-padded
    to the 7 action columns; the tool's speed is the finite difference of its
    position between samples (0 on the first)."""
    rec = Recorder(
        tmp_path / "ep",
        t0=0.0,
        cameras={},
        telemetry_hz=100,
        segment_s=1.0,
        virtual_clock=True,
        state={},
    )
    sampler = TelemetrySampler(rec, prev_t=0.0)
    twist = np.array([0.0, 0.0, 0.05, 0.0, 0.0, 0.1])
    requested = StepCommands(
        arm=ArmCommand(ArmCommandKind.cartesian_velocity, twist),
        gripper=GripperCommand(position=0.7),
        requested=twist,
        gripper_requested=0.7,
    )
    sent = ArmCommand(ArmCommandKind.cartesian_velocity, twist * 0.5)
    sampler.sample(_arm(0.01, 0.400), _gripper(0.01), keys.TelemetryPhase.awaiting_policy,
                   latency=np.nan, calls=0)  # fmt: skip
    sampler.sample(_arm(0.02, 0.403), _gripper(0.02), keys.TelemetryPhase.running,
                   requested=requested, sent=sent, step=4, latency=0.25, calls=3)  # fmt: skip
    assert sampler.is_stale(_arm(0.02, 0.5)) and not sampler.is_stale(_arm(0.03, 0.5))
    rec.close()
    table = read_segments(tmp_path / "ep" / "telemetry")
    assert table is not None and table.num_rows == 2
    col = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}

    np.testing.assert_array_equal(col[keys.T], [0.01, 0.02])
    for i, name in enumerate(keys.JOINT_POSITION):
        assert col[name][1] == pytest.approx(i * 0.1)
        assert col[keys.JOINT_VELOCITY[i]][1] == pytest.approx(-i * 0.1)
    np.testing.assert_allclose([col[n][1] for n in keys.EE_POSE], [0.403, 0.2, 0.3, 0, 1, 0, 0])
    np.testing.assert_allclose(col[keys.EE_SPEED], [0.0, 0.003 / 0.01])
    np.testing.assert_allclose([col[n][1] for n in keys.ACTION_REQUESTED[:6]], twist)
    np.testing.assert_allclose([col[n][1] for n in keys.ACTION_SENT[:6]], twist * 0.5)
    assert np.isnan(col[keys.ACTION_REQUESTED[6]][1]) and np.isnan(col[keys.ACTION_SENT[6]][1])
    # before the first action step: no command, kind "", step -1
    assert all(np.isnan(col[n][0]) for n in (*keys.ACTION_REQUESTED, *keys.ACTION_SENT))
    assert np.isnan(col[keys.GRIPPER_TARGET_REQUESTED][0])
    assert col[keys.GRIPPER_TARGET_REQUESTED][1] == pytest.approx(0.7)
    assert list(col[keys.ACTION_KIND]) == ["", "cartesian_velocity"]
    assert list(col[keys.ACTION_STEP]) == [-1, 4]
    assert list(col[keys.PHASE]) == ["awaiting_policy", "running"]
    np.testing.assert_allclose(col[keys.GRIPPER_TARGET], [0.6, 0.6])
    np.testing.assert_allclose(col[keys.GRIPPER_POSITION], [0.4, 0.4])
    assert list(col[keys.GRIPPER_OBJECT]) == [True, True]
    assert np.isnan(col[keys.POLICY_LATENCY][0]) and col[keys.POLICY_LATENCY][1] == 0.25
    assert list(col[keys.POLICY_CALLS]) == [0, 3]


def test_a_late_loop_passes_ticks_over_and_counts_them() -> None:
    ticks = TelemetryTicks(100.0)
    schedule = Schedule(10.0, 1.0, telemetry_hz=100.0, control_hz=15.0, ticks=ticks)
    assert schedule.next() == (10.0, 10.0, 10.0)
    schedule.telemetry_taken()
    schedule.action_taken()
    schedule.resume_at(10.2551)  # woke 25 ticks late
    tick = schedule.next()
    assert tick.t_tel == pytest.approx(10.25) and tick.t_act == pytest.approx(10.2)
    assert (ticks.due, ticks.late, ticks.scheduled) == (1, 24, 25)
    assert tick.action_due and not tick.telemetry_due
    schedule.resume_at(99.0)  # a stall past the end: no more ticks than the budget holds
    assert ticks.late == 101 - 1 and schedule.past_end(schedule.next())


@pytest.mark.parametrize(
    ("timed_from_call", "real_time", "first"),
    [
        (True, True, 3),  # Positronic's waypoints, 0.2 s after the call at 15 Hz
        (True, False, 0),  # time stood still while it thought
        (False, True, 0),  # openpi chunks start when they arrive
    ],
)
def test_where_playback_starts(timed_from_call: bool, real_time: bool, first: int) -> None:
    cell = build_cell("sim", sim_config())
    player = ChunkPlayer(
        cell,
        space=None,
        open_loop_steps=4,
        control_hz=15.0,
        real_time=real_time,
        envelope=Envelope.for_arm(EnvelopeSettings(), cell.arm, control_hz=15.0),
    )
    rows = np.zeros((10, 7))
    reply = Reply(rows, 0.2, 0.0, ActionSpace.cartesian_position, timed_from_call=timed_from_call)
    player.load(reply, t=5.2, asked_at=5.0)
    assert (player.row, player.span, player.rows_left) == (first, first + 4, 4)
    assert player.playing and not player.exhausted


def test_gripper_commands_carry_the_objects_speed_and_force() -> None:
    """Policies send a gripper position only: speed and force come from the
    station config, per object type where one has its own."""
    cfg = sim_config(gripper={"force": 0.4, "objects": {"spoons": {"force": 0.2, "speed": 0.5}}})
    assert cfg.gripper.for_object("spoons") == (0.5, 0.2)
    assert cfg.gripper.for_object("cubes") == (1.0, 0.4)
    cell = build_cell("sim", cfg)
    with cell:
        q = cell.arm.read_state().q
        player = ChunkPlayer(
            cell,
            space=ActionSpace.joint_position,
            open_loop_steps=1,
            control_hz=15.0,
            real_time=False,
            grip=cfg.gripper.for_object("spoons"),
            envelope=Envelope.for_arm(
                envelope_settings(cfg, cell.envelope_defaults), cell.arm, control_hz=15.0
            ),
        )
        row = np.append(q, 1.0)[None, :]
        player.load(Reply(row, 0.0, 0.0, ActionSpace.joint_position), t=0.0, asked_at=0.0)
        player.play_next()
        world = cell.arm.world  # type: ignore[attr-defined]
        assert world.grip_speed == pytest.approx(0.5, abs=1 / 255)
        assert world.grip_force == pytest.approx(0.2, abs=1 / 255)


def test_gripper_settings_are_validated_by_field() -> None:
    from proctor.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"gripper\.objects\.spoons\.force"):
        sim_config(gripper={"objects": {"spoons": {"force": 1.5}}})
