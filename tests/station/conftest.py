"""Fixtures for the station's tests: demo policy servers (in a thread or a real
subprocess), a committed database for runs that own their transactions, and
simulated cells. Every server and process started here is stopped by pid on
teardown, pass or fail."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import sessionmaker

from proctor.core.db import make_engine, make_session_factory, migrate
from proctor.core.db.engine import ProctorSession
from proctor.station.config import StationConfig, load_station_config
from proctor.station.policy.demo import DemoPolicy
from proctor.station.policy.server import Fault, PolicyServer

ROOT = Path(__file__).resolve().parents[2]
PROCTOR = [sys.executable, "-m", "proctor"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env.update(extra)
    return env


@pytest.fixture
def policy_server() -> Iterator[Callable[..., PolicyServer]]:
    """Start demo policy servers in this process (a real WebSocket on loopback)."""
    started: list[PolicyServer] = []

    def start(profile: str = "reference", fault: str | None = None, seed: int = 0) -> PolicyServer:
        server = PolicyServer(
            DemoPolicy(profile, seed=seed), fault=Fault.parse(fault) if fault else None
        ).start()
        started.append(server)
        return server

    yield start
    for s in started:
        s.stop()


class Proc:
    """A subprocess we started, stopped by its pid."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.log = cwd / f"proc-{time.monotonic_ns()}.log"
        self._out = self.log.open("w")
        self.popen = subprocess.Popen(
            args, env=env, cwd=cwd, stdout=self._out, stderr=subprocess.STDOUT, text=True
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        self._out.flush()
        return self.log.read_text()

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.output())
            if m:
                return m
            if self.popen.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no /{pattern}/ from pid {self.pid}; output:\n{self.output()}")

    def kill(self, sig: int = signal.SIGTERM) -> None:
        if self.popen.poll() is None:
            os.kill(self.pid, sig)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(10)
        self._out.close()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Start subprocesses (``proctor …``); each is ended by pid at teardown."""
    started: list[Proc] = []

    def start(args: list[str], env: dict[str, str] | None = None) -> Proc:
        proc = Proc(args, env or clean_env(), tmp_path)
        started.append(proc)
        return proc

    yield start
    for p in started:
        p.kill(signal.SIGKILL)


@pytest.fixture
def serve_demo(processes: Callable[..., Proc]) -> Callable[..., str]:
    """``proctor policy serve-demo`` in a subprocess; returns its ws:// URL."""

    def start(profile: str = "reference", fault: str | None = None) -> str:
        args = [*PROCTOR, "policy", "serve-demo", "--profile", profile, "--port", "0"]
        if fault:
            args += ["--fault", fault]
        proc = processes(args)
        return proc.wait_for(r"ws://127\.0\.0\.1:\d+").group(0)

    return start


@pytest.fixture
def station_db(fresh_db_url: str) -> Iterator[tuple[str, sessionmaker[ProctorSession]]]:
    """A migrated database the station may commit to (both backends)."""
    migrate.upgrade(fresh_db_url)
    engine = make_engine(fresh_db_url)
    yield fresh_db_url, make_session_factory(engine)
    engine.dispose()


def sim_config(**overrides: Any) -> StationConfig:
    """Small and quick: 160×120 cameras at 10 fps unless a test asks otherwise."""
    data: dict[str, Any] = {
        "cameras": {
            "exterior": {"width": 160, "height": 120, "fps": 10},
            "wrist": {"width": 160, "height": 120, "fps": 10},
        },
        "policy_timeout_s": 5.0,
    }
    data.update(overrides)
    return load_station_config(None, **data)


@contextmanager
def sim_runner(
    sessions: sessionmaker[ProctorSession], store: Any, tmp: Path, config: StationConfig
) -> Iterator[Any]:
    from proctor.station.profiles import build_cell
    from proctor.station.runner import EpisodeRunner

    runner = EpisodeRunner(
        build_cell("sim", config),
        config=config,
        sessions=sessions,
        store=store,
        spool_root=tmp / "spool",
    )
    runner.open()
    try:
        yield runner
    finally:
        runner.close()


def posed_observation(
    info: Any,
    *,
    xyz: tuple[float, float, float] = (0.45, 0.05, 0.35),
    yaw: float = 0.0,
    grip: float = 0.1,
    image_hw: tuple[int, int] = (120, 160),
    prompt: str = "put the towels in the bin",
    privileged: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One observation in ``info``'s dialect, built by the station's own
    ``build_observation``: the arm at ``xyz`` pointing down (roll π) turned by
    ``yaw``, the gripper at ``grip``, both cameras a flat grey frame."""
    import numpy as np

    from proctor.station import geometry, keys
    from proctor.station.drivers.arm.base import ArmState
    from proctor.station.drivers.gripper.base import GripperState
    from proctor.station.policy.observation import build_observation

    rot = geometry.euler_to_matrix(np.array([np.pi, 0.0, yaw]))
    arm = ArmState(
        t=0.0,
        q=np.zeros(7),
        dq=np.zeros(7),
        ee_pose=np.concatenate([xyz, geometry.matrix_to_quat(rot)]),
    )
    gripper = GripperState(t=0.0, target=grip, position=grip, object_detected=False, activated=True)
    image = np.full((*image_hw, 3), 90, np.uint8)
    return build_observation(
        info,
        arm=arm,
        gripper=gripper,
        images={keys.CAMERA_EXTERIOR: image, keys.CAMERA_WRIST: image},
        prompt=prompt,
        privileged=privileged,
    )
