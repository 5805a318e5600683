"""Homing the simulated arm from wherever a stop left it.

A stop can land with the fingers down in a tote among the items, while an
item is carried, or over the target tote; a direct joint move home from
there sweeps the fingers through a tote wall (a collision reflex), and every
later recovery used to fail the same way. Homing now lifts the tool straight
up clear of the rims first. Checked on the cell directly (a spread of poses,
reflexes included), through the episode runner (operator and safety stops at
three moments of a pick and place) and through the daemon's local API.

Homing is the operator's explicit action (the cell confirmed clear): nothing
homes after an episode or on recover (issue 15), so these tests home
explicitly where the runner used to home by itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.clock import VirtualClock
from proctor.core.domain import Outcome, Side
from proctor.core.work import Work
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.policywire.wire import keys
from proctor.station.daemon import StationDaemon
from proctor.station.demo_log import close_with_ground_truth
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind, ArmFault
from proctor.station.episode_runner import RunnerState, StopKind
from proctor.station.sim.arm import SimArm, SimArmConfig
from proctor.station.sim.gripper import SimGripper
from proctor.station.sim.world import HOME_Q, CameraSink, SimParams, SimWorld
from tests.backends import cases_on_backends
from tests.station.api_support import station_client
from tests.station.conftest import sim_config, sim_runner

DOWN = np.array([1.0, 0.0, 0.0, 0.0])
_HELD = keys.ItemState.held.code

# -- on the cell ------------------------------------------------------------------


def _cell(seed: int, tote: Side) -> tuple[VirtualClock, SimWorld, SimArm]:
    clock = VirtualClock()
    world = SimWorld(clock)
    arm, grip = SimArm(world), SimGripper(world)
    arm.connect()
    grip.connect()
    grip.activate()
    world.reset_scene("towels", 3, tote, Side.right, seed)
    return clock, world, arm


def _poses() -> list[Any]:
    """(where, x, y, z, fast): fingertips low in and around both totes; the
    fast ones are driven there at the full speed limit, so those near a wall
    end in a collision reflex."""
    rng = np.random.default_rng(11)
    out = []
    for i in range(24):
        which = "source" if i % 2 else "target"
        fx, fy = rng.uniform(-1.1, 1.1, size=2)  # up to 10 % past the walls
        z = float(rng.uniform(0.008, 0.07))
        fast = i % 3 == 0
        out.append(
            pytest.param(
                which, float(fx), float(fy), z, fast, id=f"{which}-{i}-{'fast' if fast else 'slow'}"
            )
        )
    return out


@pytest.mark.parametrize(("which", "fx", "fy", "z", "fast"), _poses())
def test_homing_lifts_the_tool_clear_before_it_moves_across(
    which: str, fx: float, fy: float, z: float, fast: bool
) -> None:
    clock, world, arm = _cell(seed=3, tote=Side.left)
    b = world.layout.source if which == "source" else world.layout.target
    x, y = b.cx + fx * b.half_x, b.cy + fy * b.half_y
    arm.send(ArmCommand(ArmCommandKind.cartesian_pose, np.array([x, y, 0.2, *DOWN])))
    clock.advance(2.0)
    world.sync()
    if not fast:
        world.params = SimParams(v_max=0.1)  # slow: blocked by a wall, never a reflex
    arm.send(ArmCommand(ArmCommandKind.cartesian_pose, np.array([x, y, z, *DOWN])))
    clock.advance(3.0)
    world.sync()
    world.params = SimParams()
    arm.stop()
    clock.advance(0.1)
    arm.recover()  # the operator's recover: the controller's error, then the stop's latch
    arm.resume()

    # a 200 fps "camera" sees the tool's path through the homing
    path = CameraSink("path", fps=200, virtual=True, capacity=10_000)
    world.add_sink(path)
    contacts = len([e for e in world.events if e.kind == "contact"])
    arm.home()
    world.remove_sink(path)
    tcp = np.array([path.frames.get_nowait().tool[:3, 3] for _ in range(path.frames.qsize())])

    np.testing.assert_allclose(world.q, HOME_Q, atol=arm.config.home_tolerance_rad)
    assert len([e for e in world.events if e.kind == "contact"]) == contacts
    start = tcp[0]
    # nothing sideways until the fingertips are clear of the rims
    low = tcp[:, 2] < world.layout.rim_height + 0.01
    sideways = np.hypot(tcp[low, 0] - start[0], tcp[low, 1] - start[1])
    assert sideways.max(initial=0.0) < 0.002, sideways.max()
    assert tcp[:, 2].min() >= min(start[2], world.layout.rim_height) - 1e-3


def test_homing_from_home_stays_put_and_a_faulted_arm_refuses() -> None:
    clock, world, arm = _cell(seed=1, tote=Side.right)
    t0 = clock.now()
    arm.home()
    assert clock.now() - t0 < 0.5
    with world.lock:
        world.error = "cartesian reflex: test"
    with pytest.raises(ArmFault, match="arm in error, not homing: cartesian reflex"):
        arm.home()


def _placed(q: np.ndarray, clearance_m: float = 0.06) -> tuple[VirtualClock, SimWorld, SimArm]:
    """The cell with the arm standing still at ``q`` (as a stop could leave it)."""
    clock, world, arm = _cell(seed=1, tote=Side.right)
    arm.config = SimArmConfig(home_clearance_m=clearance_m)
    with world.lock:
        world.q = np.asarray(q, dtype=np.float64).copy()
        world.dq = np.zeros(7)
        world._fk()  # the world's cached tool pose and Jacobian
        world._tcp_prev = world.tcp.copy()
    return clock, world, arm


def test_a_final_joint_move_that_would_sweep_the_tool_down_is_refused() -> None:
    """Hardware review #8: the tool is at home's pose but the arm on its other
    branch; the joint move to home_q would swing the fingers down to z ≈ 0.19 m,
    below this cell's clearance (25 cm above the rims, less the lift's
    tolerance: z = 0.205 m). Refused before it starts: the arm has not moved."""
    q = np.array((2.7343, 0.8224, -2.8833, -2.3504, 0.1883, 1.5453, 0.5604))
    _, world, arm = _placed(q, clearance_m=0.25)
    with pytest.raises(ArmFault, match="final joint move to home_q would take the tool down"):
        arm.home()
    np.testing.assert_allclose(world.q, q, atol=1e-3)


def test_a_wrist_turn_past_joint_7s_limit_is_refused() -> None:
    """Hardware review #8: joint 7 stopped 3.5 rad from home's; the shortest
    turn to home's orientation would drive it past its limit. Refused before
    anything moves: at home's height, and low down (fingertips at z ≈ 0.12 m,
    below the lift height), where the lift is not made either."""
    for bend in (np.zeros(7), np.array([0.0, 1.1, 0.0, 0.2, 0.0, 0.0, 0.0])):
        q = HOME_Q + bend
        q[6] -= 3.5
        _, world, arm = _placed(q)
        low = bool(world.ee_pose()[2] < world.layout.rim_height + arm.config.home_clearance_m)
        assert low == bool(bend.any())
        with pytest.raises(ArmFault, match=r"joint 7 to about .* outside its limits"):
            arm.home()
        np.testing.assert_allclose(world.q, q, atol=1e-3)


def test_a_large_wrist_turn_homes_in_stages() -> None:
    """Two rad from home's about the tool axis, within joint 7's limits: home
    is reached (in two stages of one rad)."""
    q = HOME_Q.copy()
    q[6] -= 2.0
    _, world, arm = _placed(q)
    arm.home()
    np.testing.assert_allclose(world.q, HOME_Q, atol=arm.config.home_tolerance_rad)


# -- through the runner and the daemon ------------------------------------------------


def _moment(obs: dict[str, Any], moment: str) -> bool:
    """Whether the observation shows the cell at ``moment``."""
    tcp = np.asarray(obs[keys.OBS_CARTESIAN_POSITION], dtype=float)[:3]
    items = np.asarray(obs[keys.SIM_ITEMS], dtype=float)
    rim = float(np.asarray(obs[keys.SIM_BIN_HEIGHT]).ravel()[0])
    holding = bool((items[:, 3] == _HELD).any())

    def inside(key: str) -> bool:
        cx, cy, hx, hy = np.asarray(obs[key], dtype=float).ravel()[:4]
        return abs(tcp[0] - cx) < hx - 0.02 and abs(tcp[1] - cy) < hy - 0.02

    if moment == "down in the source tote":
        return not holding and inside(keys.SIM_SOURCE_BIN) and tcp[2] < rim - 0.04
    if moment == "carrying":
        return holding and tcp[2] > rim + 0.02
    if moment == "over the target tote":
        return holding and inside(keys.SIM_TARGET_BIN) and tcp[2] < rim + 0.045
    raise AssertionError(moment)


class _StopAt(DemoPolicy):
    """The reference agent, which holds its reply at ``moment`` until the test
    has pressed stop: simulated time stands still while a policy thinks, so
    the stop lands exactly there."""

    def __init__(self, moment: str) -> None:
        super().__init__("reference")
        self.moment = moment
        self.reached = threading.Event()
        self.release = threading.Event()
        self.tcp: np.ndarray | None = None

    def new_session(self) -> Any:
        inner = super().new_session()
        outer = self

        class Session:
            def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
                reply = inner.infer(obs)
                if not outer.reached.is_set() and _moment(obs, outer.moment):
                    outer.tcp = np.asarray(obs[keys.OBS_CARTESIAN_POSITION])[:3].copy()
                    outer.reached.set()
                    outer.release.wait(30)
                return reply

            def reset(self, message: dict[str, Any]) -> None:
                inner.reset(message)

        return Session()


MOMENTS = ("down in the source tote", "carrying", "over the target tote")


@pytest.fixture
def stop_at() -> Iterator[Callable[[str], tuple[_StopAt, str]]]:
    servers: list[PolicyServer] = []

    def start(moment: str) -> tuple[_StopAt, str]:
        policy = _StopAt(moment)
        servers.append(PolicyServer(policy).start())
        return policy, servers[-1].url

    yield start
    for s in servers:
        s.stop()


def _work(url: str, seed: int) -> Work:
    return Work(
        run_code="R-HOME1",
        object_name="towels",
        items=2,
        per_item_cap_s=30.0,
        tote_side=Side.left,
        camera_side=Side.right,
        policy_url=url,
        sim_seed=seed,
    )


STOPS = [(moment, kind) for moment in MOMENTS for kind in (StopKind.operator, StopKind.safety)]


# the database does not change homing: every case on one backend, one on each
@pytest.mark.parametrize(
    ("moment", "kind", "backend"),
    cases_on_backends(STOPS, everywhere=[(MOMENTS[0], StopKind.safety)]),
    indirect=["backend"],
)
def test_a_stop_at_any_moment_then_the_operators_homing_always_gets_home(
    moment: str, kind: StopKind, station_db, stop_at, tmp_path: Path, backend: str
) -> None:
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    policy, url = stop_at(moment)
    with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
        world = runner.cell.arm.world
        runner.arm(_work(url, seed=4))
        runner.start(background=True)
        assert policy.reached.wait(60), f"the reference agent never got {moment}"
        runner.request_stop(kind)
        policy.release.set()
        runner.wait(60)
        summary = runner.last
        assert summary is not None
        expected = Outcome.safety if kind == StopKind.safety else Outcome.operator_stop
        assert summary.proposed == expected
        assert not any("homing" in n for n in summary.notes), summary.notes
        # the arm stayed where the stop caught it: nothing homes after an episode
        assert np.linalg.norm(world.tcp - policy.tcp) < 0.05
        assert not runner.cell.arm.at_home()
        if kind == StopKind.safety:
            assert runner.arm_error == "safety stop pressed"  # until the operator recovers
        else:
            assert runner.arm_error is None
        runner.close_with(lambda s, uid: close_with_ground_truth(s, store=store, uid=uid))
        if kind == StopKind.safety:
            runner.recover()
            assert np.linalg.norm(world.tcp - policy.tcp) < 0.05  # recover moves nothing
        assert runner.arm_error is None
        runner.home(cell_clear=True, open_gripper=True)
        np.testing.assert_allclose(world.q, HOME_Q, atol=0.005)
        assert not [e for e in world.events if e.kind == "contact"]
        # and the station runs the next episode to its end
        summary = runner.run_headless(_work(url, seed=5))
        assert summary.proposed == Outcome.success


# the database does not change homing: every moment on one backend, one on each
@pytest.mark.parametrize(
    ("moment", "backend"),
    cases_on_backends([(m,) for m in MOMENTS], everywhere=[(MOMENTS[0],)]),
    indirect=["backend"],
)
def test_safety_stop_and_recover_through_the_local_api(
    moment: str, station_db, stop_at, tmp_path: Path, backend: str
) -> None:
    _, sessions = station_db
    policy, url = stop_at(moment)
    cfg = sim_config(
        name="cell-homing",
        console_deadman_s=0,  # no console page here (the deadman: tests/station/test_stop.py)
        work={
            "source": "adhoc",
            "options": {"policy": url, "object": "towels", "items": 2, "seed": 4, "repeat": 3},
        },
    )
    daemon = StationDaemon(
        cfg,
        "sim",
        sessions=sessions,
        store=LocalArtifactStore(tmp_path / "artifacts"),
        spool_root=tmp_path / "spool",
    )
    daemon.open()
    try:
        world = daemon.cell.arm.world
        with station_client(daemon) as client:
            assert client.post("/api/next").json()["state"] == "armed"
            client.post("/api/start")
            assert policy.reached.wait(60), f"the reference agent never got {moment}"
            assert client.post("/api/safety-stop").status_code == 200
            policy.release.set()
            deadline = time.monotonic() + 60
            while (status := client.get("/api/status").json())["state"] != "awaiting_log":
                assert time.monotonic() < deadline, status
                time.sleep(0.05)
            assert status["proposed_outcome"] == "safety"
            logged = client.post(
                "/api/log", json={"placed": 0, "lost": 0, "dropped": 0, "outcome": "safety"}
            )
            assert logged.status_code == 200, logged.text
            recovered = client.post("/api/recover")
            assert recovered.status_code == 200, recovered.text
            assert recovered.json()["arm_error"] is None
            assert np.linalg.norm(world.tcp - policy.tcp) < 0.05  # recover moves nothing
            homed = client.post("/api/home", json={"cell_clear": True, "open_gripper": True})
            assert homed.status_code == 200, homed.text
            np.testing.assert_allclose(world.q, HOME_Q, atol=0.005)
            assert not [e for e in world.events if e.kind == "contact"]
            assert client.post("/api/next").json()["state"] == "armed"
            assert daemon.runner.state == RunnerState.armed
            assert client.post("/api/disarm").json()["state"] == "awaiting_log"
    finally:
        daemon.close()
