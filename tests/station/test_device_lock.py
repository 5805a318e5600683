"""One holder of a station's devices (hardware review #11, issue 29 item 7):
`proctor station check` refuses while the daemon holds the arm, the
gripper's line and the cameras, naming the holder, instead of becoming a
second Modbus master on the gripper's line; a daemon killed with -9 leaves
nothing locked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.core.settings import Settings
from proctor.station.config import load_station_config
from proctor.station.device_lock import DeviceLock, DevicesBusy, station_devices
from tests.station.conftest import PROCTOR, clean_env

HOLD = """
import sys, time
from pathlib import Path
from proctor.station.device_lock import DeviceLock
DeviceLock(Path(sys.argv[1]), "the station daemon test").acquire()
print("held", flush=True)
time.sleep(120)
"""


def _holder(folder: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_holder_is_refused_naming_the_first(tmp_path: Path) -> None:
    proc = _holder(tmp_path)
    try:
        with pytest.raises(
            DevicesBusy, match=rf"held by the station daemon test \(pid {proc.pid}\)"
        ):
            DeviceLock(tmp_path, "check").acquire()
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_leaves_nothing_locked(tmp_path: Path) -> None:
    proc = _holder(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with DeviceLock(tmp_path, "check") as lock:
        assert lock.path.read_text() == f"check (pid {os.getpid()})"
    # released on exit: taken again at once
    DeviceLock(tmp_path, "again").acquire().release()


def test_the_lock_file_is_private(tmp_path: Path) -> None:
    with DeviceLock(tmp_path / "spool", "check") as lock:
        assert lock.path.stat().st_mode & 0o777 == 0o600


def test_check_refuses_while_the_daemon_holds_the_devices(tmp_path: Path) -> None:
    """The CLI, as an operator would run it after a camera replug: refused at
    once, before any device (or the twin's peers) is opened."""
    config = tmp_path / "station.toml"
    config.write_text(f'name = "lock-test"\n[twin]\nworkdir = "{tmp_path / "work"}"\n')
    data = tmp_path / "data"
    folder = station_devices(
        Settings(data_dir=data), load_station_config(config), "daemon"
    ).path.parent
    proc = _holder(folder)
    try:
        out = subprocess.run(
            [*PROCTOR, "station", "check", "--profile", "twin", "--config", str(config)],
            capture_output=True,
            text=True,
            env=clean_env(PROCTOR_DATA_DIR=str(data)),
            timeout=120,
        )
        assert out.returncode != 0
        assert f"held by the station daemon test (pid {proc.pid})" in out.stderr + out.stdout
        assert "systemctl stop" in out.stderr + out.stdout
        assert not (tmp_path / "work").exists()  # no twin peer was started
    finally:
        proc.kill()
        proc.wait()
