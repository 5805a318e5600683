"""Policy servers and subprocesses for the station's and the protocol layer's
tests: demo policy servers (in a thread or a real ``proctor policy
serve-demo`` subprocess), any ``proctor …`` subprocess, and a committed
database for runs that own their transactions.

Registered for the whole suite (``pytest_plugins`` in ``tests/conftest.py``)
because ``tests/station/`` and ``tests/policywire/`` both ask for them.
Every server and process started here is stopped by pid on teardown, pass or
fail."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import sessionmaker

from proctor.core.db import make_engine, make_session_factory, migrate
from proctor.core.db.engine import ProctorSession
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import Fault, PolicyServer

ROOT = Path(__file__).resolve().parents[1]
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
