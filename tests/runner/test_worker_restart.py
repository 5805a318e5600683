"""Acceptance: kill the runner worker mid-episode. The episode ends
``system`` (the platform's fault, never the policy's), the sandboxed server
is cleaned up, the row ends ``runner_unresponsive`` once its heartbeat is
stale, and a restarted worker serves the checkpoint again: the campaign's
remaining runs complete.

Real processes throughout: ``python -m proctor runner worker`` as a
subprocess (SIGKILLed, then started again), the demo's ``command``
checkpoint (``proctor.demo.checkpoint``: a scripted arm, its environment
built from pinned wheels once per host) in bubblewrap, the gateway, and a
station daemon on the simulated cell whose operator (a thread) pauses
between runs while the test holds a gate.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from proctor.core.artifacts import open_store
from proctor.core.db.models import Assignment, Episode, Policy, Submission, User
from proctor.core.domain import (
    AssignmentStatus,
    ConformanceStatus,
    EpisodeState,
    Outcome,
    PolicyKind,
    RunnerFailure,
    RunnerFault,
    RunnerStatus,
    SubmissionKind,
)
from proctor.demo.checkpoint import build_archive
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.runner.manifest import Manifest, parse_manifest
from tests.runner.system import runner_rows, start_campaign, wait_for
from tests.scheduler import builders
from tests.scheduler.conftest import Gateway, sim_station

pytestmark = pytest.mark.slow  # the first run on a machine builds the arm's environment

STALE_S = 4.0


def _worker(db_url: str, tmp: Path, runtime: Path, n: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PROCTOR_ENV": "test",
        "PROCTOR_DATABASE_URL": db_url,
        "PROCTOR_DATA_DIR": str(tmp / "data"),
        "PROCTOR_ARTIFACTS": str(tmp / "store"),
        "PROCTOR_SECRET_KEY": "test-secret-key-" + "x" * 32,
        "PROCTOR_RUNNER__HEARTBEAT_S": "0.5",
        "PROCTOR_RUNNER__STALE_AFTER_S": str(STALE_S),
        "PROCTOR_RUNNER__RUNTIME_DIR": str(runtime),
        "PROCTOR_RUNNER__PORT_RANGE": "[19200, 19999]",
        "PROCTOR_RUNNER__MEMORY_BYTES": str(2 * 2**30),
    }
    log = (tmp / f"worker-{n}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "proctor", "runner", "worker", "--host", f"restart-{n}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )


def _checkpoint(db, tmp: Path, name: str) -> int:
    archive = build_archive(tmp / "arm.tgz", seed=3, name=name)
    stored = open_store(str(tmp / "store")).put_file(archive)
    manifest = _manifest_of(archive)
    with db.session() as s:
        owner = User(username=f"lab-{name}")
        s.add(owner)
        s.flush()
        policy = Policy(name=name, kind=PolicyKind.policy, owner_id=owner.id)
        s.add(policy)
        s.flush()
        sub = Submission(
            policy_id=policy.id,
            kind=SubmissionKind.checkpoint,
            checkpoint_sha256=stored.sha256,
            manifest=manifest.model_dump(mode="json"),
            conformance_status=ConformanceStatus.passed,  # checked in the LeRobot test
        )
        s.add(sub)
        s.flush()
        return sub.id


def _manifest_of(archive: Path) -> Manifest:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("policy.toml")
        assert member is not None
        return parse_manifest(member.read().decode())


class Operator(threading.Thread):
    """Works the campaign like ``work_the_campaign``, but waits on ``gate``
    before each run (the test holds it while it restarts the worker)."""

    def __init__(self, daemon, db, campaign: int, kill: Callable[[str], None], sid: int) -> None:
        super().__init__(daemon=True, name="operator")
        self.station, self.db, self.campaign = daemon, db, campaign
        self.kill: Callable[[str], None] | None = kill
        self.sid = sid
        self.gate = threading.Event()
        self.gate.set()
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        from proctor.station.daemon import NoWork
        from proctor.station.episode_runner import RunnerState

        try:
            while True:
                assert self.gate.wait(240), "the gate stayed shut"
                d = self.station
                d.home_arm(cell_clear=True, open_gripper=True)
                try:
                    d.next_run()
                except NoWork:
                    if not self._runs_left():
                        return
                    time.sleep(0.5)  # a checkpoint's runs wait for its runner
                    continue
                d.start()
                running = _claimed_checkpoint_run(self.db, self.sid)
                if self.kill is not None and running is not None:
                    # the checkpoint's arm is moving: kill its runner host now
                    self.gate.clear()  # and wait before the next run
                    self.kill(running)
                    self.kill = None
                for state in (RunnerState.awaiting_log, RunnerState.idle):
                    wait_for(state.value, lambda s=state, d=d: d.runner.state == s, 120, 0.05)
                    if state == RunnerState.awaiting_log:
                        d.close_with_ground_truth()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.done.set()

    def _runs_left(self) -> bool:
        with self.db.session() as s:
            return bool(
                s.scalar(
                    sa.select(sa.func.count()).where(
                        Assignment.campaign_id == self.campaign,
                        Assignment.status.in_((AssignmentStatus.pending, AssignmentStatus.claimed)),
                    )
                )
            )


def _sandbox_processes(runtime: Path) -> list[str]:
    """Command lines of live processes naming the runtime folder (bwrap's binds)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(runtime) in cmd:
            found.append(f"{proc.name}: {cmd[:200]}")
    return found


def _claimed_checkpoint_run(db, sid: int) -> str | None:
    """The run code of the checkpoint's run the station holds now, if any."""
    with db.session() as s:
        return s.scalar(
            sa.select(Assignment.run_code).where(
                Assignment.submission_id == sid, Assignment.status == AssignmentStatus.claimed
            )
        )


def test_killing_the_runner_worker_mid_episode(gateway: Gateway, tmp_path: Path) -> None:
    db = gateway.db
    tag = secrets.token_hex(3)
    name = f"dawdler-{tag}"
    runtime = Path(f"/tmp/prt-{tag}")  # short: a Unix socket's path has 107 bytes
    sid = _checkpoint(db, tmp_path, name)
    reference = PolicyServer(DemoPolicy("reference")).start()
    workers = [_worker(db.url, tmp_path, runtime, 0)]
    operator = None
    try:
        with db.session() as s:
            ref, _, _ = builders.endpoint_policy(
                s, f"demo-ref-{tag}", kind=PolicyKind.reference, url=reference.url
            )
            cid = start_campaign(
                s, reference=ref.name, policies=[name], per_item_s=30, episodes_per_cell=3
            )
        daemon = sim_station(gateway, cid, f"cell-{tag}", tmp_path)
        daemon.open()
        seen: dict[str, object] = {}

        def kill(run_code: str) -> None:
            seen["sandbox"] = _sandbox_processes(runtime)
            workers[0].send_signal(signal.SIGKILL)
            workers[0].wait(10)
            seen["run_code"] = run_code

        operator = Operator(daemon, db, cid, kill, sid)
        operator.start()
        wait_for("an episode of the checkpoint's arm", lambda: "run_code" in seen, 120)
        assert seen["sandbox"], "the sandbox was not found while serving"
        with db.session() as s:
            (first,) = runner_rows(s, sid)
            assert first.status == RunnerStatus.ready  # not yet stale
            first_id = first.id

        def closed() -> Episode | None:
            with db.session() as s:
                ep = s.scalar(sa.select(Episode).where(Episode.run_code == seen["run_code"]))
                if ep is None or ep.state != EpisodeState.closed:
                    return None
                s.expunge(ep)
                return ep

        ep = wait_for("the killed episode to close", closed, 60)
        killed_episode = ep.id
        assert ep.outcome == Outcome.system, (ep.outcome, ep.outcome_reason)
        # the sandbox died with its worker (--die-with-parent): nothing of it is left
        wait_for("the sandbox's processes to end", lambda: not _sandbox_processes(runtime), 10)

        workers.append(_worker(db.url, tmp_path, runtime, 1))

        def failed_stale() -> bool:
            with db.session() as s:
                return s.get(type(first), first_id).status == RunnerStatus.failed

        wait_for("the dead host's row to fail", failed_stale, STALE_S + 30)
        with db.session() as s:
            rows = runner_rows(s, sid)
            assert rows[0].failure == RunnerFailure.runner_unresponsive
            assert rows[0].fault == RunnerFault.platform

        def served_again() -> bool:
            with db.session() as s:
                rows = runner_rows(s, sid)
                return len(rows) == 2 and rows[1].status == RunnerStatus.ready

        wait_for("a restarted worker serving it again", served_again, 120)
        operator.gate.set()
        assert operator.done.wait(400), "the campaign's remaining runs did not finish"
        assert operator.error is None, repr(operator.error)
        daemon.close()
    except BaseException:
        with db.session() as s:
            print([(r.id, r.status, r.stage, r.failure, r.message) for r in runner_rows(s, sid)])
            print(
                s.execute(
                    sa.select(Assignment.id, Assignment.submission_id, Assignment.status).where(
                        Assignment.campaign_id == cid
                    )
                ).all()
            )
        print("operator", operator and operator.error, operator and operator.done.is_set())
        for n in range(len(workers)):
            print(f"--- worker {n}:\n" + (tmp_path / f"worker-{n}.log").read_text()[-4000:])
        raise
    finally:
        if operator is not None:
            operator.gate.set()
        reference.stop()
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
                try:
                    w.wait(30)
                except subprocess.TimeoutExpired:
                    w.kill()
                    w.wait()
        # the servers' folders stay after them (their output.log); ours go
        shutil.rmtree(runtime, ignore_errors=True)

    with db.session() as s:
        slots = s.scalars(sa.select(Assignment).where(Assignment.campaign_id == cid)).all()
        mine = [a for a in slots if a.submission_id == sid]
        # three episodes of the arm closed with a scored outcome; the killed one
        # was requeued (a platform fault is never the policy's)
        killed = s.get(Episode, killed_episode)
        assert killed is not None and killed.outcome == Outcome.system
        killed_slot = s.get(Assignment, killed.assignment_id)
        assert killed_slot is not None and killed_slot.status == AssignmentStatus.requeued
        done = [a for a in mine if a.status == AssignmentStatus.done]
        assert len(done) == 3, [(a.id, a.status) for a in mine]
        for a in done:
            ep = s.scalar(sa.select(Episode).where(Episode.assignment_id == a.id))
            assert ep is not None and ep.outcome not in (None, Outcome.system)
        assert {a.status for a in slots} <= {AssignmentStatus.done, AssignmentStatus.requeued}
        rows = runner_rows(s, sid)
        # the restarted worker's server was stopped (not failed) by its SIGTERM
        assert [r.status for r in rows] == [RunnerStatus.failed, RunnerStatus.stopped]
        assert rows[1].failure is None and rows[1].ready_at is not None
    assert not _sandbox_processes(runtime)
