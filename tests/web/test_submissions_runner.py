"""Uploaded checkpoints and their runner servers on the portal: the check is
queued at upload, the worker asks for a runner server and checks it once
ready, a failed runner fails the check, and the runner's state reaches its
owner and the admins only.

The runner host is stood in for by this test (``HostStandIn``): it writes
the ``RunnerServer`` row as a host does (``queued`` → ``building`` →
``ready`` with ``url`` and ``dialect``, or ``failed``), and the "server" it
reports is a real demo policy server on loopback. The runner host itself
(``proctor/runner``) has its own tests.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from proctor.core.db.models import ConformanceRun, RunnerServer
from proctor.core.db.types import utcnow
from proctor.core.domain import ConformanceRunStatus, Role, RunnerFailure, RunnerStatus
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.runner import queue as runner_queue
from proctor.web.submissions import worker
from tests.web.conftest import Web
from tests.web.submissions_support import (
    bearer,
    noise,
    portal_app,
    submitter,
    tar_bytes,
    upload,
)

# what the demo "reference" policy serves: the roboarena wire, Cartesian chunks of 4
COMMAND_MANIFEST = b"""\
name = "acme-ckpt"
description = "a test checkpoint"

[runner]
framework = "command"
command = ["python", "serve.py", "--port", "{port}"]
dialect = "roboarena"

[policy]
action_space = "cartesian_position"
chunk_length = 4
control_hz = 15
deterministic = true

[prompts]
default = "put the items into the target bin"
"""


def _archive() -> bytes:
    return tar_bytes(
        [
            ("policy.toml", "file", COMMAND_MANIFEST),
            ("serve.py", "file", b"print('serving')\n"),
            ("weights.bin", "file", noise(4096)),
        ]
    )


@pytest.fixture
def portal(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    yield from portal_app(web_db_url, tmp_path)


@pytest.fixture
def demo_url() -> Iterator[str]:
    server = PolicyServer(DemoPolicy("reference")).start()
    yield server.url
    server.stop()


def _uploaded(portal: Web, h: dict[str, str]) -> int:
    r = upload(portal.client(), h, _archive())
    assert r.status_code in (200, 201), r.text
    return int(r.json()["id"])


class HostStandIn:
    """Does what a runner host does with the row the worker asked for."""

    def __init__(self, portal: Web, submission_id: int, act: Callable[[RunnerServer], None]):
        self.portal, self.submission_id, self.act = portal, submission_id, act
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.seen_queued = False

    def _run(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with self.portal.db() as s:
                # alive, as a host's every tick says (else the check fails at once)
                runner_queue.host_seen(s, host="inference-7.internal", worker="w:1", now=utcnow())
                s.commit()
                row = s.scalars(
                    sa.select(RunnerServer).where(RunnerServer.submission_id == self.submission_id)
                ).first()
                if row is not None:
                    self.seen_queued = row.status == RunnerStatus.queued
                    row.status, row.stage = RunnerStatus.building, "building environment"
                    row.host, row.claimed_at = "inference-7.internal", utcnow()
                    s.commit()
                    time.sleep(0.3)
                    self.act(row)
                    s.commit()
                    return
            time.sleep(0.05)

    def __enter__(self) -> HostStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join(timeout=30)


def _work(portal: Web) -> list[worker.Outcome]:
    return worker.work(
        portal.app.state.web.session_factory, portal.settings, clock=portal.clock, poll_s=0.05
    )


def test_an_uploaded_checkpoint_is_checked_at_its_ready_runner(portal: Web, demo_url: str) -> None:
    h = submitter(portal)
    c = portal.client()
    sid = _uploaded(portal, h)
    out = c.get(f"/api/submissions/{sid}", headers=h).json()
    # queued at upload, like a registered endpoint
    assert out["check"]["status"] == "queued"
    assert "runner host" in out["conformance_report"]["summary"]
    assert out["runner"] is None

    def ready(row: RunnerServer) -> None:
        row.status, row.stage, row.url, row.dialect = (
            RunnerStatus.ready,
            "ready",
            demo_url,
            "roboarena",
        )
        row.ready_at, row.device, row.heartbeat_at = utcnow(), "cpu", utcnow()

    with HostStandIn(portal, sid, ready) as host:
        outcomes = _work(portal)
    assert host.seen_queued  # the worker asked for it
    assert [(o.submission_id, o.verdict) for o in outcomes] == [(sid, "passed")]
    with portal.db() as s:
        (row,) = s.scalars(sa.select(RunnerServer).where(RunnerServer.submission_id == sid))
        assert row.requested_for == "conformance"
    out = c.get(f"/api/submissions/{sid}", headers=h).json()
    assert out["conformance_status"] == "passed"
    assert {f["check"] for f in out["conformance_report"]["findings"]} >= {
        "chunk_length",
        "determinism",
    }
    assert out["runner"]["status"] == "ready" and out["runner"]["device"] == "cpu"
    assert demo_url not in str(out["conformance_report"])


def _failed(row: RunnerServer) -> None:
    row.status, row.stage = RunnerStatus.failed, "failed"
    row.failure, row.fault = RunnerFailure.setup_crash, RunnerFailure.setup_crash.fault
    row.finished_at = utcnow()
    row.message = "the server exited with code 1 before it was ready"
    row.diagnostics = {
        "exit_code": 1,
        "signal": None,
        "memory_peak_bytes": 123456789,
        "gpu_memory_peak_bytes": 987654321,
        "process_limit_hit": True,
        "output_tail": ["Traceback (most recent call last):", "ModuleNotFoundError: torch"],
        "build_log_tail": "Collecting torch\nERROR: No matching distribution",
        "attempts": [{"call": "clone", "refused": "process limit"}],
    }


def test_a_failing_runner_fails_the_check_and_shows_why(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    sid = _uploaded(portal, h)
    with HostStandIn(portal, sid, _failed):
        outcomes = _work(portal)
    assert [o.verdict for o in outcomes] == ["failed"]
    out = c.get(f"/api/submissions/{sid}", headers=h).json()
    assert out["conformance_status"] == "failed"
    (finding,) = out["conformance_report"]["findings"]
    assert finding["check"] == "runner" and finding["details"]["failure"] == "setup_crash"
    assert finding["details"]["fault"] == "submitter"
    assert "the server exited with code 1 before it was ready" in finding["message"]
    runner = out["runner"]
    assert runner["failure"] == "setup_crash" and runner["fault"] == "submitter"
    assert runner["exit_code"] == 1 and runner["gpu_memory_peak_bytes"] == 987654321
    assert runner["output_tail"].endswith("ModuleNotFoundError: torch")
    assert runner["limits_hit"] == ["a new process was refused (process limit)"]
    assert runner["sandbox_attempts"] == [{"call": "clone", "refused": "process limit"}]
    assert "host" not in runner and "url" not in runner

    page = c.get(f"/submit/submissions/{sid}", headers=h)
    assert page.status_code == 200
    for text in (
        "setup_crash",
        "yours: the checkpoint or its policy.toml",
        "the server exited with code 1 before it was ready",
        "ModuleNotFoundError: torch",
        "ERROR: No matching distribution",
        "987654321",
        "process limit",
    ):
        assert text in page.text, text
    assert "inference-7" not in page.text  # the host is the admins' business

    # another submitter sees nothing of it
    other = submitter(portal, "grace")
    assert c.get(f"/api/submissions/{sid}", headers=other).status_code == 404
    assert c.get(f"/submit/submissions/{sid}", headers=other).status_code == 404


def test_a_platform_failure_is_ours_and_the_check_run_errors(portal: Web) -> None:
    h = submitter(portal)
    sid = _uploaded(portal, h)

    def lost(row: RunnerServer) -> None:
        row.status, row.failure = RunnerStatus.failed, RunnerFailure.runner_unresponsive
        row.fault, row.finished_at = RunnerFailure.runner_unresponsive.fault, utcnow()
        row.message = "the runner host stopped reporting"

    with HostStandIn(portal, sid, lost):
        outcomes = _work(portal)
    assert [o.verdict for o in outcomes] == ["error"]
    out = portal.client().get(f"/api/submissions/{sid}", headers=h).json()
    assert out["conformance_status"] == "pending"  # never counted against the policy
    with portal.db() as s:
        run = s.scalars(sa.select(ConformanceRun).where(ConformanceRun.submission_id == sid)).one()
        assert run.status == ConformanceRunStatus.error and "our fault" in (run.error or "")
    page = portal.client().get(f"/submit/submissions/{sid}", headers=h).text
    assert "ours: this does not count against your policy" in page


def test_the_runners_page_is_for_admins(portal: Web) -> None:
    h = submitter(portal)
    sid = _uploaded(portal, h)
    with portal.db() as s:
        row = RunnerServer(
            submission_id=sid, status=RunnerStatus.queued, requested_for="campaign", diagnostics={}
        )
        s.add(row)
        s.flush()
        _failed(row)
        row.host = "inference-7.internal"
        s.commit()
    c = portal.client()
    assert c.get("/admin/runners", headers=h).status_code == 403
    portal.add_user("root", Role.admin)
    admin = bearer(portal.token("root", ("admin",)))
    page = c.get("/admin/runners", headers=admin)
    assert page.status_code == 200
    for text in ("acme-ckpt", "inference-7.internal", "setup_crash", "submitter", "exit_code"):
        assert text in page.text, text
    # the admin sees the runner on the submission too
    assert c.get(f"/api/submissions/{sid}", headers=admin).json()["runner"]["failure"] == (
        "setup_crash"
    )


def _work_within(portal: Web, seconds: float) -> list[worker.Outcome]:
    """The worker's outcomes, which must come within ``seconds``."""
    done: list[worker.Outcome] = []
    thread = threading.Thread(target=lambda: done.extend(_work(portal)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the check is waiting for a runner host that is not there"
    return done


def test_a_checkpoint_check_fails_at_once_when_no_runner_host_is_alive(portal: Web) -> None:
    """It used to wait out the host's build and start limits (40 minutes by
    default), holding a worker all along; now it ends at once, saying why."""
    h = submitter(portal)
    sid = _uploaded(portal, h)
    [outcome] = _work_within(portal, 30)
    assert outcome.verdict == "error"
    assert "no runner host is alive (none has ever been seen)" in outcome.summary
    out = portal.client().get(f"/api/submissions/{sid}", headers=h).json()
    assert out["check"]["status"] == "error" and "no runner host is alive" in out["check"]["error"]
    assert out["conformance_status"] == "pending"
    # a host that went silent ten minutes ago is no better, and the reason says when
    with portal.db() as s:
        then = utcnow() - timedelta(minutes=10)
        runner_queue.host_seen(s, host="inference-7.internal", worker="w:1", now=then)
    assert portal.client().post(f"/api/submissions/{sid}/check", headers=h).status_code == 202
    [outcome] = _work_within(portal, 30)
    assert outcome.verdict == "error"
    assert re.search(r"no runner host is alive \(last seen .+ UTC, 6\d\d s ago\)", outcome.summary)
