"""DROID's action units against a DROID-style server written here from the
published conventions (openpi's wire: msgpack with numpy arrays as
``{__ndarray__, data, dtype, shape}`` maps over a WebSocket, metadata first;
DROID's runtime: a normalised velocity in [-1, 1] is a per-step delta of
0.2 rad per joint, 0.075 m and 0.15 rad of tool motion, added to the
measured state at 15 Hz). Nothing of the station's codec or server is used
on the server side, so a station that drifts from the conventions fails here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.models import Episode, EpisodeEvent
from proctor.core.domain import Outcome
from proctor.core.recording import keys
from proctor.core.recording.reader import load_recording
from tests.station.conftest import sim_config, sim_runner
from tests.station.droid_support import (
    droid_server,
    droid_work,
    joint_chunk,
    recorded_steps,
)

# the simulated arm's home (``ArmConfig.home_q``): every trajectory below starts here
HOME_Q = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])


# -- the adapter, replayed by hand -------------------------------------------------------------
def _replay(rows: np.ndarray, space: str, control_hz: float = 15.0) -> list[np.ndarray]:
    """Each row through the station's adapter against an arm that reaches every
    target within its step (DROID's own assumption: the next delta is added to
    the state measured then). Returns the joint targets, step by step."""
    from proctor.policywire.wire import units
    from proctor.policywire.wire.spec import ActionSpace
    from proctor.station.control.commands import to_commands
    from proctor.station.drivers.arm.base import ArmState

    droid = units.get("droid")
    q = HOME_Q.copy()
    out = []
    for row in rows:
        state = ArmState(t=0.0, q=q, dq=np.zeros(7), ee_pose=np.array([0, 0, 0, 0, 0, 0, 1.0]))
        cmd = to_commands(
            row, ActionSpace(space), action_units=droid, state=state, control_hz=control_hz
        )
        assert cmd.arm.kind.value == "joint_position"  # a position target, as DROID sends
        q = cmd.arm.target.copy()
        out.append(q)
    return out


def test_droid_joint_velocities_over_the_wire_reproduce_droids_trajectory() -> None:
    """v = 0.5 on every joint for 15 steps: 0.5 × 0.2 rad = 0.1 rad per step, so
    after 15 steps (one second at 15 Hz) q = q0 + 15 × 0.1 = q0 + 1.5 rad:
    (1.5, 0.715, 1.5, -0.856, 1.5, 3.071, 2.285). Read as rad/s it would be
    q0 + 0.5 rad: three times slower."""
    from proctor.policywire.client import PolicyClient

    with droid_server({}, lambda obs, n: joint_chunk([0.5] * 7, h=15)) as server:
        client = PolicyClient(server.url)
        info = client.connect()
        try:
            obs = {"observation/joint_position": HOME_Q.astype(np.float32), "prompt": "x"}
            reply = client.infer(obs, timeout_s=5.0)
        finally:
            client.close()
    assert info.action_units == "droid"  # no action_space: DROID's defaults, its units too
    assert reply.space.value == "joint_velocity"
    trajectory = _replay(reply.actions, "joint_velocity")
    np.testing.assert_allclose(trajectory[0], HOME_Q + 0.1, atol=1e-6)
    np.testing.assert_allclose(
        trajectory[-1], [1.5, 0.715, 1.5, -0.856, 1.5, 3.071, 2.285], atol=1e-5
    )


def test_droid_clips_and_rescales_as_its_runtime_does() -> None:
    """Hand-derived from DROID's order (clip each column to [-1, 1], then
    delta = v × 0.2): (2, -0.5, 1e6, -1e6, 0, 0.25, -3) → (1, -0.5, 1, -1, 0,
    0.25, -1) → deltas (0.2, -0.1, 0.2, -0.2, 0, 0.05, -0.2) rad. At 30 Hz a
    step is half DROID's, so the same speed is half the delta."""
    row = np.array([[2.0, -0.5, 1e6, -1e6, 0.0, 0.25, -3.0, 0.0]])
    (q1,) = _replay(row, "joint_velocity")
    np.testing.assert_allclose(q1 - HOME_Q, [0.2, -0.1, 0.2, -0.2, 0.0, 0.05, -0.2], atol=1e-12)
    (q1,) = _replay(row, "joint_velocity", control_hz=30.0)
    np.testing.assert_allclose(q1 - HOME_Q, [0.1, -0.05, 0.1, -0.1, 0.0, 0.025, -0.1], atol=1e-12)


def test_droid_cartesian_velocities_become_pose_targets() -> None:
    """Linear (3, 4, 0) clips to (1, 1, 0), whose norm √2 > 1 rescales it to
    (0.7071, 0.7071, 0), × 0.075 m = 0.05303 m per axis; yaw 0.5 → 0.5 × 0.15
    = 0.075 rad, composed on the left of the measured orientation."""
    from proctor.core import geometry as geo
    from proctor.policywire.wire import units
    from proctor.policywire.wire.spec import ActionSpace
    from proctor.station.control.commands import to_commands
    from proctor.station.drivers.arm.base import ArmState

    down = np.array([1.0, 0.0, 0.0, 0.0])  # tool pointing straight down (x, y, z, w)
    state = ArmState(t=0.0, q=HOME_Q, dq=np.zeros(7), ee_pose=np.array([0.5, 0.0, 0.3, *down]))
    row = np.array([3.0, 4.0, 0.0, 0.0, 0.0, 0.5, 1.0])
    cmd = to_commands(
        row, ActionSpace.cartesian_velocity, action_units=units.get("droid"), state=state
    )
    assert cmd.arm.kind.value == "cartesian_pose"
    np.testing.assert_allclose(cmd.arm.target[:3], [0.55303, 0.05303, 0.3], atol=1e-5)
    r = geo.quat_to_matrix(cmd.arm.target[3:])
    expected = geo.euler_to_matrix(np.array([0.0, 0.0, 0.075])) @ geo.quat_to_matrix(down)
    np.testing.assert_allclose(r, expected, atol=1e-9)
    # the SI reading of the same row is a velocity command, unchanged
    si = to_commands(row, ActionSpace.cartesian_velocity)
    assert si.arm.kind.value == "cartesian_velocity"
    np.testing.assert_allclose(si.arm.target, row[:-1])


def _episode(station_db: Any, tmp_path: Path, url: str, **config: Any) -> Any:
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    with sim_runner(sessions, store, tmp_path, sim_config(**config)) as runner:
        uid = runner.arm(droid_work(url))
        runner.start(background=False)
        summary = runner.last
    with session_scope(sessions) as s:
        rec = load_recording(s, store, uid)
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        rec.events = {
            e.kind: e.message
            for e in s.scalars(sa.select(EpisodeEvent).where(EpisodeEvent.episode_id == ep.id))
        }
    return summary, rec


def test_a_droid_server_runs_a_whole_episode_at_droids_speed(
    station_db: Any, tmp_path: Path
) -> None:
    """Joint 1 at v = 0.05: 0.05 × 0.2 = 0.01 rad per step, i.e. 0.01 × 15 =
    0.15 rad/s once the arm follows (read as rad/s: 0.05 rad/s)."""
    with droid_server({}, lambda obs, n: joint_chunk([0.05, 0, 0, 0, 0, 0, 0])) as server:
        summary, rec = _episode(station_db, tmp_path, server.url)
    try:
        assert summary is not None and summary.proposed == Outcome.ran_out_of_time, summary
        assert server.seen and "observation/joint_position" in server.seen[0]
        policy = rec.manifest["policy"]
        assert policy["action_units"] == "droid" and policy["action_space"] == "joint_velocity"
        # what the ledger keeps when the policy connects: not how it spoke
        assert rec.events["policy_connected"] == "policy answered"
        running = rec.column(keys.PHASE) == keys.TelemetryPhase.running.value
        assert set(rec.column(keys.ACTION_KIND)[running]) == {"joint_position"}
        q, req, sent = recorded_steps(rec)
        assert len(q) >= 30  # 3 s at 15 Hz, less the first call
        # each target is the measured joints plus DROID's delta (the telemetry row
        # is read up to one tick after the step: 10 ms × 0.15 rad/s of slack)
        delta = np.median(req - q, axis=0)
        np.testing.assert_allclose(delta, [0.01, 0, 0, 0, 0, 0, 0], atol=2e-3)
        np.testing.assert_allclose(sent, req, atol=1e-9)  # nothing for the envelope to change
        assert rec.manifest["envelope"]["interventions"] == 0
        # the arm's speed: DROID adds each delta to the MEASURED joints, so an arm
        # that lags its target (the simulated one, like DROID's impedance
        # controller) moves at most 0.15 rad/s, and far above the SI reading's 0.05
        dq = np.stack([rec.column(c) for c in keys.JOINT_VELOCITY], axis=1)[running]
        steady = dq[len(dq) // 2 :]
        assert 0.1 < np.median(steady[:, 0]) <= 0.15 + 1e-3
        assert np.abs(np.median(steady[:, 1:], axis=0)).max() < 0.01
    finally:
        rec.close()


def test_a_hostile_droid_server_is_held_to_the_envelope(station_db: Any, tmp_path: Path) -> None:
    """Velocities of ±1e6 are clipped as DROID clips them (0.2 rad per step)
    and then held to the envelope like any other command: with max_step_rad
    0.05, no target is sent farther than 0.05 rad from the measured joints."""
    hostile = [1e6, -1e6, 1e6, 1e6, -1e6, 1e6, 1e6]
    with droid_server({}, lambda obs, n: joint_chunk(hostile)) as server:
        summary, rec = _episode(station_db, tmp_path, server.url, envelope={"max_step_rad": 0.05})
    try:
        assert summary is not None
        env = rec.manifest["envelope"]
        assert env["interventions"] > 0 and env["by_reason"]["step"] > 0, env
        q, req, sent = recorded_steps(rec)
        assert len(q) > 0
        # what the adapter derived: at most DROID's 0.2 rad per step
        assert np.abs(req - q).max() <= 0.2 + 0.01
        # what the envelope let through: at most its own step
        assert np.abs(sent - q).max() <= 0.05 + 0.01
        assert np.abs(req - q).max() > 0.1  # so the envelope did the clamping
    finally:
        rec.close()


# -- the conformance check --------------------------------------------------------------------
def _check(url: str) -> Any:
    from proctor.policywire.conformance.check import CheckOptions, check_endpoint

    opts = CheckOptions(observations=3, request_timeout_s=5.0, connect_timeout_s=5.0)
    return check_endpoint(url, options=opts)


def _finding(report: Any) -> Any:
    from proctor.policywire.conformance.check import format_report

    found = [f for f in report.findings if f.check == "action_units"]
    assert found, "\n".join(format_report(report))
    return found[-1]


def test_the_check_names_the_convention_a_droid_server_gets() -> None:
    with droid_server({}, lambda obs, n: joint_chunk([0.3, -0.2, 0, 0, 0, 0, 0.1])) as server:
        report = _check(server.url)
    f = _finding(report)
    assert f.status.value == "passed", f.message
    assert "DROID's normalised joint velocities" in f.message and "0.2 rad" in f.message
    assert report.passed


def test_rad_per_s_declared_as_droid_units_fails_with_what_to_change() -> None:
    """A server declaring DROID's units but sending 2.5 (rad/s): DROID's
    runtime refuses anything beyond ±1, so this cannot be its units."""
    meta = {"action_units": "droid"}
    with droid_server(meta, lambda obs, n: joint_chunk([2.5, -1.2, 0, 0, 0, 0, 0])) as server:
        report = _check(server.url)
    f = _finding(report)
    assert f.status.value == "failed"
    assert "reach 2.5" in f.message and "declare action_units: 'si'" in f.message
    assert not report.passed


def test_droid_units_declared_as_rad_per_s_are_warned_about() -> None:
    """A server naming its action space (so SI by default) and declaring
    rad/s, but sending DROID's clipped actions, saturated at exactly ±1: the
    check cannot prove it (rad/s below 1 are plausible) and says so, with
    what to declare if the policy was trained on DROID data."""
    meta = {"action_space": "joint_velocity", "action_units": "si", "action_horizon": 10}
    rows = joint_chunk([1.0, -1.0, 0.4, 0, 0, 0, 0])
    with droid_server(meta, lambda obs, n: rows) as server:
        report = _check(server.url)
    f = _finding(report)
    assert f.status.value == "warning", f.message
    assert "declare action_units: 'droid'" in f.message and "reach exactly ±1" in f.message
