"""Reflexes attributed to their cause, on the twin: the station's runner drives
the real franky driver against franky-sim, and a reflex is raised the way
libfranka raises it (franky-sim never produces one: SIMULATED FAULTS, injected
by the test-only ``FaultInjectingRobot``, with libfranka's own text and flag
names). A contact during the policy's motion is the policy's safety stop; a
broken realtime link or an unreachable target is the station's (``system``);
a reflex during the station's own motion (the operator's homing) is the
station's. Nothing homes on its own: each test homes before it arms."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import franky
import pytest
import sqlalchemy as sa

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import make_engine, make_session_factory, migrate
from proctor.core.db.models import Episode, EpisodeEvent
from proctor.core.domain import Outcome, Side
from proctor.core.recording.reader import load_recording
from proctor.core.work import Work
from proctor.policywire.serving.openpi import PolicyServer
from proctor.station.cell import Cell
from proctor.station.drivers.arm.franky import FrankyArm, FrankyArmConfig, _connect_robot
from proctor.station.episode_runner import EpisodeRunner, RunnerBusy
from proctor.station.profiles import build_cell
from proctor.station.teleop.policy import TeleopPolicy
from tests.station.drivers.conftest import wait_for
from tests.station.drivers.franky_support import FaultInjectingRobot
from tests.station.drivers.twin_support import ScriptedOperator, twin_config

pytestmark = pytest.mark.hardware

DEADLINE_S = 60.0


def reflex(flag: str) -> str:
    """libfranka's text for a reflex with this flag (createControlException)."""
    return f'libfranka: Move command aborted: motion aborted by reflex! ["{flag}"]'


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cell]:
    cell = build_cell("twin", twin_config(tmp_path_factory.mktemp("twin-reflexes")))
    try:
        yield cell
    finally:
        cell.close()


@pytest.fixture
def runner(twin: Cell, tmp_path: Path) -> Iterator[tuple[EpisodeRunner, FaultInjectingRobot, Any]]:
    """A runner on the twin whose arm is the real driver over a fault-injecting
    wrapper of its franky connection (the controller takes one client: the
    twin's own arm lets go first)."""
    twin.arm.disconnect()
    wrapped: list[FaultInjectingRobot] = []

    def factory(c: FrankyArmConfig) -> FaultInjectingRobot:
        wrapped.append(FaultInjectingRobot(_connect_robot(c)))
        return wrapped[-1]

    assert isinstance(twin.arm, FrankyArm)
    arm = FrankyArm(twin.arm.config, robot_factory=factory)
    cell = Cell(
        profile="twin", clock=twin.clock, arm=arm, gripper=twin.gripper, cameras=twin.cameras
    )
    url = f"sqlite:///{tmp_path / 'station.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    r = EpisodeRunner(
        cell,
        config=twin_config(tmp_path / "unused"),
        sessions=sessions,
        store=LocalArtifactStore(tmp_path / "artifacts"),
        spool_root=tmp_path / "spool",
    )
    r.open()
    # the operator's Activate: a hardware daemon's start leaves the gripper alone
    r.activate_gripper()
    try:
        yield r, wrapped[0], sessions
    finally:
        wrapped[0].clear()
        r.close()  # closes the shared drivers too: the next test reconnects them
        # franky-sim serves one client: let go of the connection now, even if a
        # failed test's traceback still holds the wrapper (else the next test's
        # connect waits out its timeout behind this one)
        wrapped[0].release()
        engine.dispose()


def _work(url: str) -> Work:
    return Work(
        run_code="R-TWINRX",
        object_name="spoons",
        items=1,
        per_item_cap_s=30.0,
        tote_side=Side.right,
        camera_side=Side.left,
        policy_url=url,
    )


@pytest.mark.parametrize(
    ("flag", "outcome", "cause", "charged_class"),
    [
        ("cartesian_reflex", Outcome.safety, "policy", None),
        # the realtime link: no motion of the policy's causes it, never charged
        ("communication_constraints_violation", Outcome.system, "station", None),
        # the station clipped a target into its box that the arm cannot reach:
        # the station's, but it followed the policy's own motion, so the
        # scheduler charges it to the policy past its free ones (review #4)
        (
            "cartesian_motion_generator_joint_position_limits_violation",
            Outcome.system,
            "station",
            "policy_motion",
        ),
    ],
)
def test_a_reflex_during_the_policys_motion_is_attributed(
    runner: tuple[EpisodeRunner, FaultInjectingRobot, Any],
    flag: str,
    outcome: Outcome,
    cause: str,
    charged_class: str | None,
) -> None:
    r, robot, sessions = runner
    # the operator homes first (nothing homes on its own: an earlier test's
    # reflex left the arm where it stopped)
    r.home(cell_clear=True)
    with PolicyServer(TeleopPolicy(ScriptedOperator())) as server:
        uid = r.arm(_work(server.url))
        r.start(background=True)
        wait_for(lambda: r.status().get("elapsed_s", 0.0) > 1.0, DEADLINE_S, "the episode")
        robot.inject("poll_motion", lambda: franky.ControlException(reflex(flag)))
        r.wait(DEADLINE_S)
    summary = r.last
    assert summary is not None and summary.uid == uid
    assert summary.proposed == outcome, summary.reason
    assert summary.reason.startswith(f"arm fault: reflex error (ControlException): {reflex(flag)}")
    with sessions() as s:
        rec = load_recording(s, r.store, uid)
        manifest = rec.manifest
        rec.close()
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        events = {
            e.kind: e.details
            for e in s.scalars(sa.select(EpisodeEvent).where(EpisodeEvent.episode_id == ep.id))
        }
    record = manifest["arm_fault"]
    assert record["cause"] == cause and record["proposed_outcome"] == outcome.value
    assert record["flags"] == [flag] and record["deciding_flag"] == flag
    assert record["kind"] == "reflex" and record["origin"] == "policy"
    assert events["finished"]["proposed_outcome"] == outcome.value
    ending = events["safety_stop" if outcome == Outcome.safety else "system_fault"]
    assert ending["arm_fault"] == record
    assert ending.get("fault") == charged_class
    # the driver's fault line is in the manifest too
    messages = [ln["message"] for ln in manifest["fault_lines"]["lines"]]
    assert any(m.startswith("ARM FAULT: reflex error") for m in messages), messages
    # the arm stays latched until the operator recovers
    assert r.cell.arm.read_state().error is not None


def test_a_reflex_while_the_station_homes_is_the_stations(
    runner: tuple[EpisodeRunner, FaultInjectingRobot, Any],
) -> None:
    """A contact reflex, but no policy was driving: the station's own command
    (the operator's homing)."""
    r, robot, _ = runner
    robot.inject("join_motion", lambda: franky.ControlException(reflex("cartesian_reflex")))
    with pytest.raises(RunnerBusy, match="homing failed: reflex error"):
        r.home(cell_clear=True)
    status = r.status()
    assert status["state"] == "idle" and status["arm_error"] is not None
    fault = status["arm_fault"]
    assert fault["cause"] == "station" and fault["proposed_outcome"] == "system"
    assert fault["origin"] == "station" and fault["flags"] == ["cartesian_reflex"]
    # nothing is armed on a faulted arm (the policy is never dialled)
    with pytest.raises(RunnerBusy, match="the arm is in error"):
        r.arm(_work("ws://127.0.0.1:9"))
    r.recover()
    assert r.status()["arm_fault"] is None and r.status()["arm_error"] is None
