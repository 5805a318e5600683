"""Stop always stops, and homing is the operator's (issue 15 items 1 and 2),
on the simulated cell: the arm's halt latch and the stop/send race, a safety
stop during each phase of homing, a stop while armed that start cannot
erase, no homing after an episode, on recover or on close, and the
console-link deadman through the station's API on a loopback port.

The same latch and homing on the real driver against franky-sim are in
tests/station/drivers/test_franky_arm.py.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from proctor.core import episode_record
from proctor.core.artifacts import LocalArtifactStore
from proctor.core.clock import VirtualClock
from proctor.core.domain import Outcome, Side
from proctor.core.work import Work
from proctor.station.demo_log import close_with_ground_truth
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind, ArmHalted, RobotMode
from proctor.station.drivers.gripper.base import GripperCommand, GripperHalted
from proctor.station.episode_runner import EpisodeRunner, RunnerBusy, RunnerState, StopKind
from proctor.station.sim import kinematics as kin
from proctor.station.sim.arm import SimArm
from proctor.station.sim.gripper import SimGripper
from proctor.station.sim.world import HOME_Q, SimWorld
from tests.station.api_support import key_headers
from tests.station.conftest import sim_config, sim_runner
from tests.web.console_support import (
    adhoc_source,
    bind_loopback,
    demo_policies,
    running_station,
    sock_url,
)

DOWN = np.array([1.0, 0.0, 0.0, 0.0])
CONTROL_PERIOD_S = 1.0 / 15.0  # the station's default control_hz


def _cell() -> tuple[VirtualClock, SimWorld, SimArm]:
    clock = VirtualClock()
    world = SimWorld(clock)
    arm, grip = SimArm(world), SimGripper(world)
    arm.connect()
    grip.connect()
    grip.activate()
    world.reset_scene("towels", 3, Side.left, Side.right, 1)
    return clock, world, arm


AWAY = ArmCommand(ArmCommandKind.joint_position, HOME_Q + np.array([0.4, 0, 0, 0.2, 0, 0, 0]))


# -- the latch on the simulated arm --------------------------------------------------


def test_a_stop_latches_the_arm_until_an_explicit_resume() -> None:
    clock, world, arm = _cell()
    arm.send(AWAY)
    clock.advance(0.2)
    arm.stop()
    assert arm.halted
    with pytest.raises(ArmHalted, match="refusing to move"):
        arm.send(AWAY)
    with pytest.raises(ArmHalted, match="refusing to home"):
        arm.home()
    clock.advance(1.0)
    world.sync()
    assert arm.read_state().mode == RobotMode.idle
    arm.resume()
    assert not arm.halted
    arm.send(AWAY)
    clock.advance(0.1)
    assert arm.read_state().mode == RobotMode.move


def test_a_send_waiting_on_the_arm_lock_cannot_move_the_arm_after_a_stop() -> None:
    """The race: a command already waiting for the arm's lock while a stop
    holds it would start a fresh motion once the stop lets go. The latch,
    set under that lock, makes it refuse instead."""
    clock, world, arm = _cell()
    outcome: list[BaseException | ArmCommand] = []

    def send() -> None:
        try:
            outcome.append(arm.send(AWAY))
        except BaseException as exc:
            outcome.append(exc)

    with world.lock:  # the stop holds the arm's lock (the real driver's join_motion)
        arm.stop()
        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(0.2)
        assert outcome == []  # the command waits for the lock
    sender.join(5)
    assert len(outcome) == 1 and isinstance(outcome[0], ArmHalted), outcome
    clock.advance(2.0)
    world.sync()
    np.testing.assert_allclose(world.q, HOME_Q, atol=1e-9)  # it never moved


# -- a safety stop during homing ---------------------------------------------------------


def _work(url: str, seed: int = 2, items: int = 2) -> Work:
    return Work(
        run_code="R-STOP1",
        object_name="towels",
        items=items,
        per_item_cap_s=30.0,
        tote_side=Side.left,
        camera_side=Side.right,
        policy_url=url,
        sim_seed=seed,
    )


def _phase(world: SimWorld) -> str | None:
    """Which homing move the simulated arm is executing (None: none yet): the
    traverse aims at the home pose, the lift straight up from where it was."""
    cmd = world.command
    if cmd is None:
        return None
    if cmd.kind == ArmCommandKind.joint_position:
        return "joints"
    home_xy = kin.forward(HOME_Q)[2][:2, 3]
    return "traverse" if np.allclose(cmd.target[:2], home_xy, atol=1e-6) else "lift"


@pytest.fixture
def realtime_runner(station_db, tmp_path: Path) -> Iterator[EpisodeRunner]:
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    config = sim_config(sim={"clock": "monotonic"})
    with sim_runner(sessions, store, tmp_path, config) as runner:
        yield runner


@pytest.mark.parametrize(
    ("phase", "start_from"),
    [
        ("lift", "in the source tote"),
        ("traverse", "in the source tote"),
        ("joints", "elbow turned"),
        ("lift", "awaiting its log"),
    ],
)
def test_a_safety_stop_during_homing_halts_the_arm_at_once(
    realtime_runner: EpisodeRunner, policy_server, phase: str, start_from: str
) -> None:
    runner = realtime_runner
    arm = runner.cell.arm
    assert isinstance(arm, SimArm)
    world = arm.world
    if start_from == "awaiting its log":
        runner.arm(_work(policy_server("reference").url))
        runner.disarm()
        assert runner.state == RunnerState.awaiting_log
    if start_from == "elbow turned":
        arm.send(
            ArmCommand(ArmCommandKind.joint_position, HOME_Q + np.array([0, 0, 0.8, 0, 0, 0, 0]))
        )
    else:  # the fingertips down in the source tote, where a stop can leave them
        b = world.layout.source
        arm.send(ArmCommand(ArmCommandKind.cartesian_pose, np.array([b.cx, b.cy, 0.2, *DOWN])))
        time.sleep(2.0)
        arm.send(ArmCommand(ArmCommandKind.cartesian_pose, np.array([b.cx, b.cy, 0.03, *DOWN])))
    deadline = time.monotonic() + 20
    while np.any(np.abs(arm.read_state().dq) > 1e-3) or time.monotonic() < deadline - 17:
        assert time.monotonic() < deadline, "the arm did not come to rest"
        time.sleep(0.02)
    if start_from != "elbow turned":
        assert world.tcp[2] < world.layout.rim_height  # down in the tote
    back_to = runner.state

    ended: list[BaseException | None] = []

    def home() -> None:
        try:
            runner.home(cell_clear=True)
            ended.append(None)
        except BaseException as exc:
            ended.append(exc)

    homing = threading.Thread(target=home)
    homing.start()
    deadline = time.monotonic() + 30
    while True:  # the phase, with the arm under way
        with world.lock:
            world.sync()
            now_phase = _phase(world)
            speed = world.tcp_speed()
        if now_phase == phase and (speed > 0.01 or np.abs(world.dq).max() > 0.05):
            break
        assert time.monotonic() < deadline and homing.is_alive(), (now_phase, ended)
        time.sleep(0.002)
    assert runner.state == RunnerState.homing
    t_stop = runner.cell.clock.now()
    runner.request_stop(StopKind.safety)
    with world.lock:
        assert world.command is None  # the motion is withdrawn by the stop itself
    homing.join(30)
    assert len(ended) == 1 and isinstance(ended[0], RunnerBusy), ended
    assert "stopped by a safety stop" in str(ended[0])
    # at rest within one control period of the press (the sim brakes at 3× its
    # acceleration limit), and it stays there
    while np.any(np.abs(arm.read_state().dq) > 1e-6):
        assert runner.cell.clock.now() - t_stop < 1.0, "still moving a second later"
        time.sleep(0.002)
    at_rest = arm.read_state()
    assert at_rest.t - t_stop <= CONTROL_PERIOD_S, at_rest.t - t_stop
    time.sleep(0.3)
    np.testing.assert_allclose(arm.read_state().q, at_rest.q, atol=1e-9)
    assert not arm.at_home()
    assert runner.state == back_to
    assert runner.arm_error is not None and "safety stop" in runner.arm_error
    # only the operator's recover clears it; then homing goes through
    with pytest.raises(RunnerBusy, match="recover it first"):
        runner.home(cell_clear=True)
    runner.recover()
    assert not arm.at_home()  # recover moves nothing
    runner.home(cell_clear=True)
    assert arm.at_home()
    assert not [e for e in world.events if e.kind == "contact"]


# -- stops and episodes ----------------------------------------------------------------


def test_a_stop_while_armed_is_not_erased_by_start_and_its_kind_does_not_leak(
    station_db, policy_server, tmp_path: Path
) -> None:
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    url = policy_server("reference").url
    config = sim_config(sim={"clock": "monotonic"})
    with sim_runner(sessions, store, tmp_path, config) as runner:
        runner.arm(_work(url, items=3))
        runner.request_stop(StopKind.safety)
        assert runner.cell.arm.halted
        # the fingers too (hardware review #7): halted until an operator's action
        assert runner.cell.gripper.halted
        with pytest.raises(GripperHalted):
            runner.cell.gripper.send(GripperCommand(position=1.0))
        with pytest.raises(RunnerBusy, match="stopped while armed"):
            runner.start()
        assert runner.state == RunnerState.armed and runner.cell.arm.halted
        runner.disarm()
        runner.submit_log(
            episode_record.OperatorLog.parse(
                {"placed": 0, "lost": 0, "dropped": 0, "outcome": "operator_stop"}
            )
        )
        runner.recover()
        assert not runner.cell.gripper.halted  # the operator's recovery resumes it
        runner.home(cell_clear=True)
        # the next run's operator stop is an operator stop, not the old safety stop
        runner.arm(_work(url, items=3, seed=3))
        runner.start(background=True)
        time.sleep(0.5)
        runner.request_stop(StopKind.operator)
        runner.wait(60)
        assert runner.last is not None
        assert runner.last.proposed == Outcome.operator_stop, runner.last.reason
        assert runner.last.reason == "operator stop"
        assert runner.arm_error is None


def test_nothing_homes_after_an_episode_on_recover_or_on_close(
    station_db, policy_server, tmp_path: Path
) -> None:
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    url = policy_server("reference").url
    runner_ref: list[EpisodeRunner] = []
    homings: list[str] = []
    with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
        runner_ref.append(runner)
        arm = runner.cell.arm
        real_home = arm.home

        def counted() -> None:  # instrumentation: the real homing, counted
            homings.append(runner.state.value)
            real_home()

        arm.home = counted  # type: ignore[method-assign]
        summary = runner.run_headless(_work(url, seed=4))
        assert summary.proposed == Outcome.success
        assert not arm.at_home() and homings == []  # not after the episode
        runner.close_with(lambda s, uid: close_with_ground_truth(s, store=store, uid=uid))
        with pytest.raises(RunnerBusy, match="home it first"):
            runner.check_ready()
        runner.request_stop(StopKind.safety)
        runner.recover()
        assert homings == []  # not on recover
        runner.home(cell_clear=True, open_gripper=True)
        assert homings == ["homing"]
        runner.arm(_work(url, seed=5))
        runner.start(background=True)
        # the station shuts down mid-episode: it stops, and does not home
    assert homings == ["homing"]
    last = runner_ref[0].last
    assert last is not None and last.reason == "station shutting down"


# -- the console-link deadman -------------------------------------------------------------


@contextlib.contextmanager
def _console_station(db_url: str, tmp_path: Path) -> Iterator[tuple[Any, httpx.Client]]:
    """A sim daemon in real time behind its local API on loopback, and a client
    that reaches it as the console does (the host's key), for the deadman tests."""
    from proctor.core.db import migrate

    migrate.upgrade(db_url)
    sock = bind_loopback()
    with (
        demo_policies("reference") as (server,),
        running_station(
            sock=sock,
            db_url=db_url,
            artifacts=str(tmp_path / "artifacts"),
            spool=tmp_path / "spool",
            source=adhoc_source(server.url, items=3, cap_s=30.0),
            clock="monotonic",
            key_file=tmp_path / "station-api.key",
        ) as daemon,
        httpx.Client(
            base_url=sock_url(sock), headers=key_headers(tmp_path / "station-api.key"), timeout=60
        ) as http,
    ):
        yield daemon, http


def test_the_console_deadman_stops_a_running_episode_when_the_heartbeats_stop(
    fresh_db_url: str, tmp_path: Path
) -> None:
    with _console_station(fresh_db_url, tmp_path) as (daemon, http):
        deadman_s = daemon.config.console_deadman_s
        assert deadman_s == 2.0  # the default
        assert http.post("/api/next").json()["state"] == "armed"
        assert http.post("/api/start").json()["state"] == "running"
        # a console that beats keeps the episode running past the deadman's period
        until = time.monotonic() + deadman_s + 1.5
        last_beat = time.monotonic()
        while last_beat < until:
            assert http.post("/api/heartbeat").json()["ok"] is True
            last_beat = time.monotonic()
            time.sleep(0.3)
        assert http.get("/api/status").json()["state"] == "running"
        status: dict[str, Any] = {}
        while (status := http.get("/api/status").json())["state"] == "running":
            assert time.monotonic() - last_beat < deadman_s + 3.0, "the deadman never fired"
            time.sleep(0.05)
        stopped_after = time.monotonic() - last_beat
        assert stopped_after > deadman_s - 0.1, stopped_after
        while (status := http.get("/api/status").json())["state"] != "awaiting_log":
            time.sleep(0.05)
        assert status["proposed_outcome"] == "operator_stop"
        assert status["reason"].startswith("console link lost: no heartbeat")
        assert "console link lost" in status["notice"]["message"]


def test_the_console_deadman_stops_homing_when_the_heartbeats_stop(
    fresh_db_url: str, tmp_path: Path
) -> None:
    """Hardware review #8 / issue 29 item 5: homing asked for from the console
    crosses the cell, so it is watched like an episode; a console that goes
    silent gets a safety stop (the arm halts and needs the operator's
    Recover). The simulated arm's homing is made slow here (it waits for the
    halt latch), so that the console's silence outlasts the deadman."""
    with _console_station(fresh_db_url, tmp_path) as (daemon, http):
        arm = daemon.runner.cell.arm
        started = threading.Event()

        def slow_home() -> None:
            started.set()
            deadline = time.monotonic() + 30.0
            while not arm.halted:
                assert time.monotonic() < deadline, "homing was never stopped"
                time.sleep(0.02)
            raise ArmHalted("home")

        arm.home = slow_home  # type: ignore[method-assign]
        t0 = time.monotonic()
        answer = http.post("/api/home", json={"cell_clear": True})
        assert started.is_set()
        assert answer.status_code == 409, answer.text
        assert "stopped by a safety stop" in answer.text
        assert time.monotonic() - t0 > daemon.config.console_deadman_s - 0.1
        status = http.get("/api/status").json()
        assert status["state"] == "idle"
        assert str(status["arm_error"]).startswith("console link lost")
        assert "homing was stopped" in status["notice"]["message"]
        assert not daemon.deadman.watching  # type: ignore[union-attr]
