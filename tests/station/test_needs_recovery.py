"""A station whose arm is in reflex or error when it starts: pre-flight only
warns (the daemon's unit runs it first, and a failure would keep the daemon,
and the console's Recover, from ever starting), the daemon starts needing
recovery, and nothing is armed until the operator recovers. On the simulated
cell, whose controller is put in reflex before the station opens."""

from __future__ import annotations

from pathlib import Path

import pytest

from proctor.core.artifacts import LocalArtifactStore
from proctor.station.episode_runner import EpisodeRunner, RunnerBusy
from proctor.station.preflight import CheckStatus, PreflightSettings, check_arm
from proctor.station.profiles import build_cell
from tests.backends import once
from tests.station.conftest import sim_config
from tests.station.faults_support import fault_work

# pre-flight reads the arm's state for a while of the cell's clock: a real one here
REAL_TIME = sim_config(sim={"clock": "monotonic"})
LEFT_OVER = "cartesian_reflex: contact with the tote wall at 0.40 m/s"


@once()
def test_an_arm_in_reflex_at_start_needs_recovery_first(
    station_db, policy_server, tmp_path: Path, backend: str
) -> None:
    _, sessions = station_db
    config = REAL_TIME
    cell = build_cell("sim", config)
    world = cell.arm.world  # type: ignore[attr-defined]
    with world.lock:
        world.error = LEFT_OVER  # the last session ended in a reflex nobody recovered
    runner = EpisodeRunner(
        cell,
        config=config,
        sessions=sessions,
        store=LocalArtifactStore(tmp_path / "artifacts"),
        spool_root=tmp_path / "spool",
    )
    # pre-flight: a warning that names the error, not a failure
    result = check_arm(cell, PreflightSettings(state_rate_hz=1.0))
    assert result.status == CheckStatus.warning, result.line()
    assert LEFT_OVER in result.detail and "needing recovery" in result.detail
    runner.open()  # the daemon starts
    try:
        status = runner.status()
        assert status["state"] == "idle"
        assert status["arm_error"] == f"needs recovery: {LEFT_OVER}"
        server = policy_server("steady")
        with pytest.raises(RunnerBusy, match="recover it first"):
            runner.arm(fault_work(server.url))
        runner.recover()  # the operator's Recover on the console
        assert runner.status()["arm_error"] is None
        assert runner.arm(fault_work(server.url))  # arming works again
        runner.disarm()
    finally:
        runner.close()


def test_preflight_still_fails_an_arm_outside_its_limits_in_error() -> None:
    """Only the controller's error is advisory: the other arm checks stay fatal."""
    import dataclasses

    cell = build_cell("sim", REAL_TIME)
    world = cell.arm.world  # type: ignore[attr-defined]
    with world.lock:
        world.error = LEFT_OVER
    arm = cell.arm
    q = world.q.copy()
    arm.config = dataclasses.replace(  # as if joint 4 had been guided past its limit
        arm.config, q_max=(*arm.config.q_max[:3], q[3] - 0.1, *arm.config.q_max[4:])
    )
    try:
        result = check_arm(cell, PreflightSettings(state_rate_hz=1.0))
    finally:
        cell.close()
    assert result.status == CheckStatus.failed and "outside its limits" in result.detail
