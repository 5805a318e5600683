"""Real sandboxes for the tests: bubblewrap, the cgroups of this host, and a
tiny venv (no pip) as the environment; the servers are the scripts in
``scripts/``, copied into a checkpoint folder."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from proctor.runner.frameworks.base import ServerLaunch
from proctor.runner.sandbox import Sandbox, start
from proctor.runner.sandbox.base import Limits, SandboxSpec

SCRIPTS = Path(__file__).parent / "scripts"
PORT = 9000
LIMITS = Limits(memory_bytes=256 * 2**20, max_processes=64, cpu_seconds=60)

StartSandbox = Callable[..., Sandbox]


@pytest.fixture(scope="session")
def env_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sandbox-env") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Work folders under a short path: a Unix socket's path has 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="sbx-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sandboxes(env_dir: Path, short_dir: Path) -> Iterator[StartSandbox]:
    """``make(name, script, *args, limits=…, env=…, cgroups=…)``: a started sandbox
    running ``scripts/<script>``; every one is stopped at the end."""
    started: list[Sandbox] = []

    def make(
        name: str,
        script: str,
        *args: str,
        limits: Limits = LIMITS,
        env: dict[str, str] | None = None,
        cgroups: str = "auto",
    ) -> Sandbox:
        checkpoint = short_dir / name / "ckpt"
        checkpoint.mkdir(parents=True)
        shutil.copy(SCRIPTS / script, checkpoint / script)
        argv = (str(env_dir / "bin" / "python"), f"/checkpoint/{script}", *args)
        spec = SandboxSpec(
            launch=ServerLaunch(argv=argv, port=PORT, dialect="openpi"),
            env_dir=env_dir,
            checkpoint_dir=checkpoint,
            work_dir=short_dir / name / "w",
            limits=limits,
            env=env or {},
        )
        sandbox = start(spec, cgroups=cgroups)
        started.append(sandbox)
        return sandbox

    yield make
    for sandbox in started:
        sandbox.stop(grace_s=1.0)


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """A generous deadline for a condition (the machine may be loaded)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {condition}")
        time.sleep(0.02)


def round_trip(connect: Callable[[], socket.socket], payload: bytes) -> bytes:
    """``payload`` sent and everything echoed back. Sending and reading at
    once: an echo of a large payload fills every buffer on the way back
    while the sender is still sending, and a sender that reads only after
    would wait on itself."""
    with connect() as conn:
        conn.settimeout(60)

        def send() -> None:
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        chunks = []
        while chunk := conn.recv(1 << 18):
            chunks.append(chunk)
        sender.join()
        return b"".join(chunks)


def unix(path: Path) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(path))
        return conn

    return connect


def tcp(port: int) -> Callable[[], socket.socket]:
    return lambda: socket.create_connection(("127.0.0.1", port), timeout=20)


def echo_ready(sandbox: Sandbox) -> None:
    """Until the echo server answers through the bridge."""

    def answers() -> bool:
        if not sandbox.wire_socket.exists():
            return False
        try:
            return round_trip(unix(sandbox.wire_socket), b"ping") == b"ping"
        except OSError:
            return False

    wait_for(answers)
