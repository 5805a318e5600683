"""Protocol peers for the driver tests: franky-sim on loopback, a socat pty
pair carrying Modbus RTU, and the simulated 2F-85 on pymodbus's server.

Every peer is stopped in teardown, also when a test fails: franky-sim idles
at about a third of a core and the machine is shared.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from proctor.station.drivers.arm.base import ArmConfig
from proctor.station.twin.peers import FrankySimProcess, SocatPtyPair

HOME_Q = ArmConfig.home_q


@dataclass(frozen=True)
class PtyPair:
    driver_end: Path  # the driver opens this one, as it would /dev/ttyUSB0
    device_end: Path  # the simulated gripper serves this one


def wait_for(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.005)


@pytest.fixture
def pty_pair(tmp_path: Path) -> Iterator[PtyPair]:
    if shutil.which("socat") is None:
        pytest.fail("socat is not installed (./run test installs it: TEST_DEBS)", pytrace=False)
    socat = SocatPtyPair(tmp_path / "ttyDRIVER", tmp_path / "ttyDEVICE")
    socat.start()
    try:
        yield PtyPair(driver_end=socat.driver_end, device_end=socat.device_end)
    finally:
        socat.stop()


@pytest.fixture(scope="module")
def franky_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One franky-sim process per test module (it takes ~2 s to start), with
    the arm at the station's home pose; yields the loopback host it bound.

    A separate process, not a thread: franky's bindings can hold the GIL while
    they wait on the controller, and an in-process simulator then deadlocks."""
    sim = FrankySimProcess(
        initial_q=HOME_Q, log_path=tmp_path_factory.mktemp("franky-sim") / "franky-sim.log"
    )
    host = sim.start()
    try:
        yield host
    finally:
        sim.stop()
