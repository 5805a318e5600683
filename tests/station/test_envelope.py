"""The envelope (``proctor.station.envelope``) against a hostile policy: a real
WebSocket policy server on loopback, written here from the wire's keys alone,
that drives at maximum outwards and downwards, sends jumps, orientation flips
and finally NaNs, in each of the four action spaces, on the simulated cell.
The recorded tool never leaves the workspace box, tilts past the cone or
moves faster than the cap; the episode ends cleanly (the NaN reply is a
protocol fault) with every intervention counted in the telemetry, the
manifest and the events. The envelope's own arithmetic is tested on its own
below, with the simulated cell's kinematics."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from proctor.core import geometry as geo
from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.models import Episode, EpisodeEvent
from proctor.core.domain import Outcome, Side
from proctor.core.recording import keys
from proctor.core.recording.reader import load_recording
from proctor.core.work import Work
from proctor.policywire.serving.openpi import PolicyServer
from proctor.station.config import EnvelopeSettings, load_station_config
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind, ArmConfig, ArmState
from proctor.station.envelope import Envelope, EnvelopeStop, envelope_settings
from proctor.station.profiles.sim import SIM_ENVELOPE
from proctor.station.sim import kinematics as kin
from proctor.station.sim.arm import sim_arm_limits
from proctor.station.sim.world import SimParams
from tests.backends import once
from tests.station.conftest import sim_config, sim_runner
from tests.station.envelope_support import ATTACK_ROWS, SCHEDULE, HostilePolicy

# the real cell's cap, on the simulated cell (whose own default is 1 m/s)
CAP = 0.25
# how far a recorded sample may stray past a limit: the sim arm tracks a
# clamped target without overshoot, but a velocity held for a control period
# and the 100 Hz finite difference of the speed each add a little
BOX_TOL_M = 0.01
SPEED_TOL = 1.05  # × the cap
CONE_TOL_RAD = math.radians(3.0)


def _work(url: str) -> Work:
    return Work(
        run_code="R-ENVELOPE",
        object_name="spoons",
        items=1,
        per_item_cap_s=60.0,
        tote_side=Side.left,
        camera_side=Side.right,
        policy_url=url,
        sim_seed=3,
    )


def _config(space: str = "") -> Any:
    # the simulated arm's physics would hold the cap itself, a catch-all the
    # real arm lacks for velocity commands: off for joint velocities, so that
    # only the envelope holds them (the position spaces keep it: the simulated
    # arm has no model of franky's per-motion velocity factor, which holds
    # those on the real arm and is tested on the twin)
    sim = {"enforce_tool_speed": space != "joint_velocity"}
    return sim_config(envelope={"max_tool_speed": CAP}, sim=sim)


@pytest.fixture
def hostile_server():
    started: list[PolicyServer] = []

    def start(space: str, schedule: list[str] = SCHEDULE) -> PolicyServer:
        server = PolicyServer(HostilePolicy(space, schedule)).start()
        started.append(server)
        return server

    yield start
    for s in started:
        s.stop()


def _run(sessions: Any, tmp_path: Path, url: str, space: str = "") -> tuple[Any, Any, list[Any]]:
    store = LocalArtifactStore(tmp_path / "artifacts")
    with sim_runner(sessions, store, tmp_path, _config(space)) as runner:
        uid = runner.arm(_work(url))
        runner.start(background=False)
        summary = runner.last
    with session_scope(sessions) as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        events = list(
            s.scalars(
                sa.select(EpisodeEvent)
                .where(EpisodeEvent.episode_id == ep.id)
                .order_by(EpisodeEvent.id)
            )
        )
        rec = load_recording(s, store, uid)
    return summary, rec, [(e.kind, e.t_s, e.message, dict(e.details or {})) for e in events]


@pytest.mark.parametrize("space", list(ATTACK_ROWS))
@once()
def test_a_hostile_policy_cannot_take_the_tool_out_of_the_envelope(
    space: str, hostile_server, station_db, tmp_path: Path, backend: str
) -> None:
    _, sessions = station_db
    summary, rec, events = _run(sessions, tmp_path, hostile_server(space).url, space)
    limits = envelope_settings(_config(), SIM_ENVELOPE)
    lo, hi = np.array(limits.workspace_min), np.array(limits.workspace_max)
    lo[2] = max(lo[2], limits.table_z + limits.table_margin_m)
    try:
        # it ended cleanly, and never by a reflex: at its last attack (the NaN
        # reply is a protocol fault, system), or — where the simulated arm, asked
        # for the box's corner beyond its reach, traded the commanded
        # orientation for position — by the envelope's watch on the measured
        # tool (a safety stop)
        ended = (summary.proposed, summary.reason.split(":")[0])
        assert ended in {
            (Outcome.system, "malformed policy reply"),
            (Outcome.safety, "envelope"),
        }, summary.reason
        if summary.proposed == Outcome.system:
            assert "NaN" in summary.reason
        else:
            assert "measured tool tilted" in summary.reason
        xyz = np.stack([rec.column(c) for c in keys.EE_POSE[:3]], axis=1)
        quat = np.stack([rec.column(c) for c in keys.EE_POSE[3:]], axis=1)
        speed = rec.column(keys.EE_SPEED)
        mask = rec.column(keys.ENVELOPE)
        steps = rec.column(keys.ACTION_STEP)
        print(
            f"{space}: x {xyz[:, 0].min():.3f}…{xyz[:, 0].max():.3f}, "
            f"y {xyz[:, 1].min():.3f}…{xyz[:, 1].max():.3f}, z ≥ {xyz[:, 2].min():.4f}, "
            f"speed ≤ {speed.max():.3f} m/s, {int(steps.max()) + 1} steps"
        )
        # the policy did get to play its attack (outwards and down at least), the arm moved
        assert steps.max() >= 70 and np.ptp(xyz, axis=0).max() > 0.1
        assert (xyz >= lo - BOX_TOL_M).all() and (xyz <= hi + BOX_TOL_M).all()
        assert speed.max() <= CAP * SPEED_TOL
        tilt = np.array([math.acos(min(1.0, -geo.quat_to_matrix(qq)[2, 2])) for qq in quat])
        assert tilt.max() <= math.radians(limits.cone_deg + limits.watch_tilt_deg) + CONE_TOL_RAD
        # the arm is at rest at the end of the recorded tail
        assert speed[-5:].max() < 1e-3
        # every intervention counted: the manifest (the contract's shape), the
        # telemetry column and the events agree
        env = rec.manifest["envelope"]
        assert set(env) == {"interventions", "by_reason", "limits"}
        assert set(env["by_reason"]) == {r.value for r in keys.EnvelopeReason}
        assert env["limits"] == limits.model_dump(mode="json")
        assert env["by_reason"]["workspace"] > 0 and env["by_reason"]["jump"] == 0
        marked = {int(s) for s, m in zip(steps, mask, strict=True) if m == m and m > 0}
        assert 0 < len(marked) <= env["interventions"] <= len(marked) + 1
        runs = [d for kind, _, _, d in events if kind == keys.ENVELOPE_EVENT]
        assert runs and sum(d["steps"] for d in runs) == env["interventions"]
        assert all(d["reason"] == "+".join(d["reasons"]) and d["reasons"] for d in runs)
        # an untouched step is sent as asked, bit for bit
        req = np.stack([rec.column(c) for c in keys.ACTION_REQUESTED], axis=1)
        sent = np.stack([rec.column(c) for c in keys.ACTION_SENT], axis=1)
        clean = (mask == 0) & (steps >= 0)
        assert clean.any()
        assert np.array_equal(req[clean], sent[clean], equal_nan=True) or space.startswith(
            "cartesian_position"  # the arm normalises a pose's quaternion
        )
    finally:
        rec.close()


@once()
def test_a_first_target_far_from_the_arm_stops_the_episode(
    hostile_server, station_db, tmp_path: Path, backend: str
) -> None:
    """A policy in the wrong frame or units: its first target is refused, the
    arm never moves toward it, the episode is a safety stop."""
    _, sessions = station_db
    summary, rec, events = _run(sessions, tmp_path, hostile_server("joint_position", ["out"]).url)
    try:
        assert summary.proposed == Outcome.safety
        assert summary.reason.startswith("envelope: the first target"), summary.reason
        assert rec.column(keys.EE_SPEED).max() < 1e-3  # nothing moved
        assert rec.manifest["envelope"]["interventions"] == 0
        assert [k for k, *_ in events if k == "safety_stop"]
    finally:
        rec.close()


# -- the envelope's arithmetic ---------------------------------------------------


def _state(q: np.ndarray) -> ArmState:
    tool = kin.forward(q)[2]
    pose = np.concatenate([tool[:3, 3], geo.matrix_to_quat(tool[:3, :3])])
    return ArmState(t=0.0, q=q, dq=np.zeros(7), ee_pose=pose)


SIM_LIMITS = sim_arm_limits(SimParams())


def _envelope(**limits: Any) -> Envelope:
    settings = EnvelopeSettings(**{**SIM_ENVELOPE, "max_tool_speed": CAP, **limits})
    env = Envelope(settings, kin.arm_kinematics, SIM_LIMITS, control_hz=15.0)
    env._first = False
    return env


HOME = _state(np.array(ArmConfig.home_q))


def test_a_cartesian_target_slides_along_the_walls_and_is_shortened() -> None:
    env = _envelope(max_step_m=0.05)
    down = geo.matrix_to_quat(geo.euler_to_matrix(np.array([math.pi, 0.0, 0.0])))
    # below the table and far out on y: clipped onto the box, then shortened to
    # 5 cm from the measured tool along the line toward that point
    g = env.guard(
        ArmCommand(ArmCommandKind.cartesian_pose, np.array([0.3, 2.0, -1.0, *down])), HOME
    )
    p0 = HOME.ee_pose[:3]
    aim = np.array([0.3, 0.45, env.lo[2]]) - p0
    sent = g.command.target[:3]
    assert np.linalg.norm(sent - p0) == pytest.approx(0.05)
    assert np.allclose((sent - p0) / 0.05, aim / np.linalg.norm(aim))
    assert g.reasons == {keys.EnvelopeReason.workspace, keys.EnvelopeReason.step}
    assert g.command.max_tool_speed == CAP
    # pointing up: tilted back onto the cone's edge
    up = geo.matrix_to_quat(np.eye(3))
    g = _envelope(max_step_rad=3.2).guard(
        ArmCommand(ArmCommandKind.cartesian_pose, np.array([*p0, *up])), HOME
    )
    tilt = math.acos(-geo.quat_to_matrix(g.command.target[3:])[2, 2])
    assert tilt == pytest.approx(math.radians(45.0), abs=1e-6)
    assert g.reasons == {keys.EnvelopeReason.orientation}


def test_velocities_are_capped_and_stop_at_the_walls() -> None:
    env = _envelope()
    g = env.guard(
        ArmCommand(ArmCommandKind.cartesian_velocity, np.array([0.0, 0.0, -3.0, 0, 0, 0])),
        HOME,
    )
    assert g.command.target[2] == pytest.approx(-CAP)
    # the table is 0.43 m below home: far enough for a 0.3 s horizon at the cap
    assert g.reasons == {keys.EnvelopeReason.speed}
    low = _state(np.array(ArmConfig.home_q))
    low_pose = low.ee_pose.copy()
    low_pose[2] = env.lo[2] + 0.03
    at_floor = ArmState(t=0.0, q=low.q, dq=low.dq, ee_pose=low_pose)
    g = env.guard(
        ArmCommand(ArmCommandKind.cartesian_velocity, np.array([0.1, 0.0, -0.2, 0, 0, 0])),
        at_floor,
    )
    # down only as far as the horizon leaves above the table; sideways untouched
    assert g.command.target[2] == pytest.approx(-0.03 / env.horizon)
    assert g.command.target[0] == 0.1
    # joint velocities: the tool's speed (a fine finite difference of the FK) at the cap
    g = env.guard(ArmCommand(ArmCommandKind.joint_velocity, np.full(7, 3.0)), HOME)
    dq = g.command.target
    ahead = kin.forward(HOME.q + dq * 1e-4)[2][:3, 3]
    assert np.linalg.norm(ahead - HOME.ee_pose[:3]) / 1e-4 <= CAP * 1.01
    assert keys.EnvelopeReason.speed in g.reasons


def test_a_joint_target_is_shortened_to_stay_in_the_box() -> None:
    env = _envelope()
    g = env.guard(ArmCommand(ArmCommandKind.joint_position, np.array(ArmConfig.q_max)), HOME)
    q = g.command.target
    tool = kin.forward(q)[2]
    assert np.max(np.abs(q - HOME.q)) <= SIM_ENVELOPE["max_step_rad"] + 1e-9
    assert env.excess(tool[:3, 3], tool[:3, :3]).box == 0.0
    assert g.reasons  # it was changed, and the reasons say how


def test_the_first_target_far_away_is_refused() -> None:
    env = _envelope()
    env._first = True
    far = HOME.ee_pose.copy()
    far[0] += 0.4
    with pytest.raises(EnvelopeStop, match=r"first target lay 0\.400 m"):
        env.guard(ArmCommand(ArmCommandKind.cartesian_pose, far), HOME)
    # only the first: later steps are shortened instead
    g = env.guard(ArmCommand(ArmCommandKind.cartesian_pose, far), HOME)
    assert keys.EnvelopeReason.step in g.reasons


def test_the_station_config_overrides_the_profile_defaults() -> None:
    config = load_station_config(None, envelope={"max_tool_speed": 0.1})
    merged = envelope_settings(config, SIM_ENVELOPE)
    assert merged.max_tool_speed == 0.1
    assert merged.workspace_min == SIM_ENVELOPE["workspace_min"]
    assert envelope_settings(load_station_config(None), {}).max_tool_speed == 0.25
    from proctor.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"envelope\.workspace_max"):
        load_station_config(None, envelope={"workspace_max": (0.1, 0.5, 0.5)})


def test_the_simulated_arms_own_speed_cap_is_a_switch() -> None:
    from proctor.core.errors import ConfigError
    from proctor.station.profiles.sim import sim_params

    assert sim_params({"enforce_tool_speed": False})[1].enforce_tool_speed is False
    assert sim_params({})[1].enforce_tool_speed is True
    with pytest.raises(ConfigError, match=r"sim\.enforce_tool_speed: must be true or false"):
        sim_params({"enforce_tool_speed": 1})
