"""Kill the process running a campaign (SIGKILL, no cleanup) mid-campaign,
twice, start it again: the allocation continues with no gaps or repeats —
on both databases, through the campaign work source the station uses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from proctor.core.db.models import Assignment, Episode
from proctor.core.domain import AssignmentStatus
from proctor.scheduler import service
from proctor.scheduler.service import Actor
from tests.scheduler import builders
from tests.scheduler.conftest import CommittedDb

ROOT = Path(__file__).resolve().parents[2]


class Worker:
    def __init__(self, db: CommittedDb, campaign_id: int, station: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.scheduler.worker", db.url, str(campaign_id), station],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def line(self) -> str:
        assert self.proc.stdout is not None
        out = self.proc.stdout.readline().strip()
        if not out:
            self.proc.wait(timeout=30)
            raise AssertionError(f"worker exited ({self.proc.returncode}) without a line")
        return out

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        assert self.proc.returncode == -signal.SIGKILL

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def _episode(worker: Worker, expect: str | None = None) -> str | None:
    """One ready → claim → episode cycle; returns the run code, or None at the end."""
    assert worker.line() == "ready"
    worker.go()
    line = worker.line()
    if line == "finished":
        return None
    kind, code = line.split()
    assert kind == "claimed" and (expect is None or code == expect), line
    worker.go()
    assert worker.line() == f"done {code}"
    return code


def test_killed_mid_campaign_resumes_with_no_gaps_or_repeats(committed_db: CommittedDb) -> None:
    with committed_db.session() as s:
        w = builders.world(s, 2, objects=("spoons", "towels"))
        c = service.create_campaign(
            s, protocol=builders.protocol(w, episodes_per_cell=3), actor=Actor(label="t")
        )
        service.start_campaign(s, campaign=c.id, actor=Actor(label="t"))
        order = list(
            s.scalars(
                sa.select(Assignment.run_code)
                .where(Assignment.campaign_id == c.id)
                .order_by(Assignment.sequence)
            )
        )
    station = f"cell-{c.id}"
    done: list[str] = []

    # 1: killed while holding a committed claim, before its episode ran
    worker = Worker(committed_db, c.id, station)
    try:
        done += [_episode(worker) for _ in range(4)]
        assert worker.line() == "ready"
        worker.go()
        held = worker.line().split()[1]
        worker.kill()
    finally:
        worker.close()

    # 2: restarted, it gets the held run back first; then killed between episodes,
    # holding nothing
    worker = Worker(committed_db, c.id, station)
    try:
        done.append(_episode(worker, expect=held))
        done += [_episode(worker) for _ in range(4)]
        assert worker.line() == "ready"
        worker.kill()
    finally:
        worker.close()

    # 3: restarted, it takes the next slot in the allocation and runs to the end
    worker = Worker(committed_db, c.id, station)
    try:
        done.append(_episode(worker, expect=order[len(done)]))
        while (code := _episode(worker)) is not None:
            done.append(code)
        assert worker.proc.wait(timeout=30) == 0
    finally:
        worker.close()

    assert done == order  # every slot once, in allocation order: no gaps, no repeats
    with committed_db.session() as s:
        statuses = set(
            s.scalars(sa.select(Assignment.status).where(Assignment.campaign_id == c.id))
        )
        episodes = s.scalars(
            sa.select(Episode.run_code).where(Episode.campaign_id == c.id).order_by(Episode.id)
        ).all()
    assert statuses == {AssignmentStatus.done}
    assert list(episodes) == order  # exactly one episode per slot, nothing orphaned
