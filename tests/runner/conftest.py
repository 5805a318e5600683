"""Fixtures for the runner's framework side: the real LeRobot environment
(built through ``EnvStore`` under ~/.cache/proctor/runner-envs, once per
machine, then reused by every run), real checkpoints made with LeRobot
itself, and LeRobot servers started directly with the environment's python
(no sandbox: that is ``proctor/runner/sandbox``'s to test). Every process
started here is stopped by pid on teardown."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from proctor.runner.envs import BuiltEnv
from proctor.runner.frameworks.base import HELPERS_DIR, SANDBOX_CHECKPOINT, SANDBOX_HELPERS
from proctor.runner.frameworks.lerobot import Lerobot
from proctor.runner.manifest import Manifest
from tests.lerobot_env import MANIFEST, lerobot_manifest  # noqa: F401

# the scheduler's committed database and gateway, for the system tests here
from tests.scheduler.conftest import committed_db, gateway  # noqa: F401

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def checkpoints(lerobot_env: BuiltEnv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``act/`` (with saved processors) and ``diffusion/``
    (without): tiny random policies saved by LeRobot's save_pretrained."""
    root = tmp_path_factory.mktemp("lerobot-checkpoints")
    done = subprocess.run(
        [str(lerobot_env.python), str(HERE / "make_checkpoints.py"), str(root)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Started:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def host_argv(argv: tuple[str, ...], checkpoint_root: Path) -> list[str]:
    """A launch's sandbox paths mapped to where they are on this host (what
    the sandbox's binds do)."""
    out = []
    for part in argv:
        if part.startswith(SANDBOX_HELPERS + "/"):
            part = str(HELPERS_DIR / part.removeprefix(SANDBOX_HELPERS + "/"))
        elif part == SANDBOX_CHECKPOINT or part.startswith(SANDBOX_CHECKPOINT + "/"):
            part = str(checkpoint_root) + part.removeprefix(SANDBOX_CHECKPOINT)
        out.append(part)
    return out


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}):\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the server did not listen within {limit_s:g} s:\n{log.read_text()}")


@pytest.fixture
def lerobot_server(
    lerobot_env: BuiltEnv, checkpoints: Path, tmp_path: Path
) -> Iterator[Callable[[Manifest], Started]]:
    """Start the LeRobot server for a manifest exactly as ``Lerobot.launch``
    says (its placeholders filled for the built environment)."""
    started: list[Started] = []

    def start(manifest: Manifest) -> Started:
        port = free_port()
        launch = Lerobot().launch(manifest, port).fill(lerobot_env.path)
        log = tmp_path / f"server-{port}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                host_argv(launch.argv, checkpoints),
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **launch.env},
                start_new_session=True,
            )
        server = Started(f"ws://127.0.0.1:{port}", proc, log)
        started.append(server)
        _wait_listening(port, proc, log, 180)
        return server

    yield start
    for server in started:
        if server.proc.poll() is None:
            os.killpg(server.proc.pid, signal.SIGTERM)
            try:
                server.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(server.proc.pid, signal.SIGKILL)
                server.proc.wait()
