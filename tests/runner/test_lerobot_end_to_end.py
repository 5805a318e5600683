"""Acceptance: a LeRobot checkpoint made by LeRobot in the test is uploaded
through the API, built, checked and run for whole episodes on the simulated
cell through the gateway.

Everything is real and on loopback: the web app under uvicorn (the upload
protocol over HTTP), the conformance worker, a runner host (``RunnerWorker``
in threads: the LeRobot environment, the bubblewrap sandbox, the relay), the
blinded gateway, and a station daemon on the simulated cell. The checkpoint
is ``act-gentle`` (tests/runner/make_checkpoints.py): a randomly initialised
ACT policy whose unnormalised actions are small joint velocities.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
import numpy as np
import sqlalchemy as sa

from proctor.core.artifacts import open_store
from proctor.core.db.models import Assignment, Episode, Policy
from proctor.core.domain import (
    AssignmentStatus,
    ConformanceStatus,
    EpisodeState,
    Outcome,
    PolicyKind,
    RunnerStatus,
)
from proctor.core.recording import keys
from proctor.core.recording.reader import load_telemetry
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.runner.envs import BuiltEnv
from proctor.web.app import create_app
from proctor.web.submissions import worker as conformance
from tests.browser import serve_app
from tests.runner.system import (
    WorkerThread,
    folder_files,
    runner_rows,
    start_campaign,
    submission_of,
    system_settings,
    tar_folder,
)
from tests.scheduler import builders
from tests.scheduler.conftest import Gateway, sim_station, work_the_campaign
from tests.web.conftest import FakeClock, Web
from tests.web.submissions_support import submitter, upload

MANIFEST = """\
name = "{name}"
description = "a tiny ACT policy, randomly initialised by LeRobot"

[runner]
framework = "lerobot"
policy_path = "act-gentle"

[policy]
action_space = "joint_velocity"
chunk_length = 8
control_hz = 15
cameras = ["exterior", "wrist"]

[prompts]
default = "put the items into the target bin"
"""


def test_a_lerobot_checkpoint_is_uploaded_checked_and_runs_whole_sim_episodes(
    lerobot_env: BuiltEnv, checkpoints: Path, gateway: Gateway, tmp_path: Path
) -> None:
    db = gateway.db
    tag = secrets.token_hex(3)
    name = f"act-gentle-{tag}"
    settings = system_settings(db.url, tmp_path / "data")
    archive = tar_folder(
        {
            "policy.toml": MANIFEST.format(name=name).encode(),
            **folder_files(checkpoints / "act-gentle", "act-gentle"),
        }
    )
    app = create_app(settings)
    h = submitter(Web(app=app, clock=FakeClock(), settings=settings), f"lab-{tag}")
    reference = PolicyServer(DemoPolicy("reference")).start()
    try:
        with serve_app(app, settings) as live, httpx.Client(base_url=live.base_url) as http:
            r = upload(http, h, archive, chunk=1 << 20)
            assert r.status_code in (200, 201), r.text
            sid = int(r.json()["id"])
            assert http.get(f"/api/submissions/{sid}", headers=h).json()["check"]["status"] == (
                "queued"
            )
            with WorkerThread(settings):
                outcomes = conformance.work(db.factory, settings, poll_s=0.2)
                assert [(o.submission_id, o.verdict) for o in outcomes] == [(sid, "passed")], (
                    outcomes
                )
                page = http.get(f"/api/submissions/{sid}", headers=h).json()
                assert page["conformance_status"] == "passed"
                assert page["runner"]["status"] == "ready"

                with db.session() as s:
                    ref, _, _ = builders.endpoint_policy(
                        s, f"demo-ref-{tag}", kind=PolicyKind.reference, url=reference.url
                    )
                    cid = start_campaign(
                        s, reference=ref.name, policies=[name], episodes_per_cell=2
                    )
                daemon = sim_station(gateway, cid, f"cell-{tag}", tmp_path)
                daemon.open()
                try:
                    work_the_campaign(daemon, timeout=180)
                finally:
                    daemon.close()
                with db.session() as s:
                    rows = runner_rows(s, sid)
                    assert [row.status for row in rows] == [RunnerStatus.ready], [
                        (row.status, row.failure, row.message) for row in rows
                    ]
                    assert rows[0].last_used_at is not None and rows[0].ready_at is not None
                    assert rows[0].last_used_at > rows[0].ready_at
                    assert rows[0].device == "cpu"
    finally:
        reference.stop()

    with db.session() as s:
        sub = submission_of(s, sid)
        assert sub.conformance_status == ConformanceStatus.passed
        policy = s.get(Policy, sub.policy_id)
        assert policy is not None and policy.name == name
        slots = s.scalars(
            sa.select(Assignment).where(
                Assignment.campaign_id == cid, Assignment.submission_id == sid
            )
        ).all()
        assert len(slots) == 2
        assert {a.status for a in slots} == {AssignmentStatus.done}
        episodes = [
            s.scalar(sa.select(Episode).where(Episode.assignment_id == a.id)) for a in slots
        ]
        store = open_store(str(tmp_path / "artifacts"))
        for ep in episodes:
            assert ep is not None and ep.state == EpisodeState.closed
            assert ep.outcome is not None and ep.outcome != Outcome.system, ep.outcome_reason
            telemetry = load_telemetry(s, store, ep)
            kinds = np.array(telemetry.column(keys.ACTION_KIND).to_pylist())
            moving = kinds == "joint_velocity"
            # the policy drove the episode: its joint velocities, chunk after chunk
            assert moving.sum() > 20, set(kinds.tolist())
            requested = np.stack(
                [telemetry.column(k).to_numpy()[moving] for k in keys.ACTION_REQUESTED[:7]]
            )
            assert np.isfinite(requested).all()
            assert np.abs(requested).max() < 1.0  # gentle: around 0 with std 0.05
            assert np.abs(requested).max() > 0.0  # and not a held still arm
            assert len({tuple(col) for col in requested.T.round(6)}) > 1
