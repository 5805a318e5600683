"""A station unit that starts with the arm in Reflex (hardware review #3, #12;
issue 29 item 7): the pre-flight its unit runs first (``--daemon-start``)
warns instead of failing, so systemd does not restart-loop the daemon with
the console's Recover out of reach; nothing moves and the gripper is not
activated with nobody watching; the operator's Recover and Activate then
bring the station to where it arms a run.

On the twin (the real franky driver against franky-sim, the real Robotiq
driver against the simulated 2F-85 over a pty). franky-sim never enters
Reflex, so the controller's mode is SIMULATED: the test-only wrapper reports
``RobotMode.Reflex`` in every state until ``recover_from_errors`` is called,
as libfranka reports a reflex nobody recovered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import franky
import pytest

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import make_engine, make_session_factory, migrate
from proctor.station.cell import Cell
from proctor.station.drivers.arm.franky import FrankyArm, FrankyArmConfig, _connect_robot
from proctor.station.episode_runner import EpisodeRunner, RunnerBusy
from proctor.station.preflight import CheckStatus, PreflightSettings, run_checks
from proctor.station.profiles import build_cell
from tests.station.drivers.franky_support import FaultInjectingRobot
from tests.station.drivers.twin_support import twin_config

pytestmark = pytest.mark.hardware

# the twin's settings, relaxed for a shared CI machine as test_twin.py's RELAXED
SETTINGS = PreflightSettings.for_profile(
    "twin", {"preflight": {"state_rate_hz": 20.0, "camera_rate_tolerance": 0.5}}
)


class _ReflexState:
    """A controller state as libfranka sends it in Reflex: the real state of
    franky-sim with the mode replaced."""

    def __init__(self, state: Any) -> None:
        self._state = state

    def __getattr__(self, name: str) -> Any:
        if name == "robot_mode":
            return franky.RobotMode.Reflex
        return getattr(self._state, name)


class InReflexUntilRecovered(FaultInjectingRobot):
    """TEST-ONLY: the arm a reflex left in Reflex mode (see the module's
    docstring); counts the motions it is asked for."""

    def __init__(self, robot: franky.Robot) -> None:
        super().__init__(robot)
        self.in_reflex = True
        self.moves = 0

    @property
    def state(self) -> Any:
        real = super().state
        return _ReflexState(real) if self.in_reflex else real

    def move(self, motion: Any, asynchronous: bool = False) -> None:
        self.moves += 1
        super().move(motion, asynchronous=asynchronous)

    def recover_from_errors(self) -> bool:
        ok = super().recover_from_errors()
        self.in_reflex = False
        return ok


@pytest.fixture
def reflex_cell(tmp_path: Path) -> Iterator[tuple[Cell, InReflexUntilRecovered]]:
    twin = build_cell("twin", twin_config(tmp_path / "twin"))
    wrapped: list[InReflexUntilRecovered] = []

    def factory(c: FrankyArmConfig) -> InReflexUntilRecovered:
        wrapped.append(InReflexUntilRecovered(_connect_robot(c)))
        return wrapped[-1]

    assert isinstance(twin.arm, FrankyArm)
    arm = FrankyArm(twin.arm.config, robot_factory=factory)
    cell = Cell(
        profile="twin", clock=twin.clock, arm=arm, gripper=twin.gripper, cameras=twin.cameras
    )
    try:
        cell.arm.connect()
        yield cell, wrapped[0]
    finally:
        cell.close()
        if wrapped:
            wrapped[0].release()
        twin.close()  # the peers (franky-sim, the pty, the simulated gripper)


def test_preflight_at_unit_start_warns_for_reflex_and_moves_nothing(
    reflex_cell: tuple[Cell, InReflexUntilRecovered], tmp_path: Path
) -> None:
    cell, robot = reflex_cell
    results = list(run_checks(cell, SETTINGS, tmp_path, "twin", daemon_start=True))
    by_name = {r.name: r for r in results}
    failed = [r.line() for r in results if r.status is CheckStatus.failed]
    assert failed == [], failed  # the unit's ExecStartPre exits 0
    mode = by_name["robot mode"]
    assert mode.status is CheckStatus.warning and mode.detail.startswith("Reflex"), mode.line()
    assert "needing recovery" in mode.detail
    motion = by_name["test motion"]
    assert motion.status is CheckStatus.warning and "not run at unit start" in motion.detail
    assert robot.moves == 0  # nothing moved with nobody watching
    assert robot.in_reflex


def test_preflight_by_hand_still_fails_an_arm_in_reflex(
    reflex_cell: tuple[Cell, InReflexUntilRecovered], tmp_path: Path
) -> None:
    """At the cell (no ``--daemon-start``) Reflex is a failure, as before: the
    operator recovers before the test motion can prove the loop."""
    cell, robot = reflex_cell
    by_name = {r.name: r for r in run_checks(cell, SETTINGS, tmp_path, "twin")}
    assert by_name["robot mode"].status is CheckStatus.failed
    assert by_name["test motion"].status is CheckStatus.failed
    assert robot.moves == 0


def test_the_daemon_starts_needing_recovery_then_recover_and_activate_arm_it(
    reflex_cell: tuple[Cell, InReflexUntilRecovered], tmp_path: Path
) -> None:
    cell, robot = reflex_cell
    url = f"sqlite:///{tmp_path / 'station.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    runner = EpisodeRunner(
        cell,
        config=twin_config(tmp_path / "unused"),
        sessions=make_session_factory(engine),
        store=LocalArtifactStore(tmp_path / "artifacts"),
        spool_root=tmp_path / "spool",
    )
    runner.open()  # the daemon's start
    try:
        status = runner.status()
        assert status["state"] == "idle"
        assert str(status["arm_error"]).startswith("needs recovery: reflex")
        # no activation at a hardware daemon's start: the fingers did not sweep
        assert not cell.gripper.read_state().activated
        with pytest.raises(RunnerBusy, match="recover it first"):
            runner.check_ready()
        runner.recover()  # the console's Recover
        assert runner.status()["arm_error"] is None and not robot.in_reflex
        with pytest.raises(RunnerBusy, match="gripper is not activated"):
            runner.check_ready()
        runner.activate_gripper()  # the console's Activate, hands clear
        assert cell.gripper.read_state().activated
        runner.check_ready()  # at home, recovered, activated: a run may be armed
        assert robot.moves == 0  # recovering and activating moved no joint
    finally:
        runner.close()
        engine.dispose()
