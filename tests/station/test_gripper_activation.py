"""The gripper is activated only when it needs to be (hardware review #7): at
start if it is not yet, never on an operator's recover after a safety stop
(the fingers may hold an item, a hand may be at them), and on its own
explicit request."""

from __future__ import annotations

import time
from pathlib import Path

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.domain import Outcome, Side
from proctor.core.work import Work
from proctor.station.demo_log import close_with_ground_truth
from proctor.station.episode_runner import StopKind
from tests.backends import once
from tests.station.conftest import sim_config, sim_runner


@once()  # the database does not change the gripper's activation
def test_recover_leaves_the_gripper_alone(
    station_db, policy_server, tmp_path: Path, backend: str
) -> None:
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    server = policy_server("steady")
    with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
        gripper = runner.cell.gripper
        assert gripper.activations == 1  # type: ignore[attr-defined]  # at start: it was not
        # a second connect finds it ready: no activation
        runner.cell.connect()
        assert gripper.activations == 1  # type: ignore[attr-defined]
        work = Work(
            run_code="R-GRIP1", object_name="towels", items=2, per_item_cap_s=30.0,
            tote_side=Side.left, camera_side=Side.left, policy_url=server.url, sim_seed=1,
        )  # fmt: skip
        runner.arm(work)
        runner.start(background=True)
        deadline = time.monotonic() + 30
        while runner.status().get("elapsed_s", 0.0) < 1.0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        runner.request_stop(StopKind.safety)
        runner.wait(30)
        assert runner.last is not None and runner.last.proposed == Outcome.safety
        runner.close_with(lambda s, uid: close_with_ground_truth(s, store=store, uid=uid))
        runner.recover()
        assert runner.arm_error is None
        assert gripper.activations == 1  # type: ignore[attr-defined]  # recover did not sweep it
        runner.activate_gripper()  # the operator's explicit request
        assert gripper.activations == 2  # type: ignore[attr-defined]
