"""Snapshot recomputation with several server processes (``proctor serve
--workers N``): each process has its own background worker, and at start-up
all of them queue the same stale campaigns. Two workers on two engines (as
two processes have) recompute one campaign at the same moment: one scores
it, the other waits for it and adds nothing, and neither fails."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest
import sqlalchemy as sa

from proctor.analysis import store as analysis_store
from proctor.core.db.engine import make_engine, make_session_factory, session_scope
from proctor.core.db.models import AnalysisSnapshot
from proctor.web.snapshots.worker import SnapshotWorker
from tests.web.leaderboard_data import seed_campaign

WAIT_S = 300.0
# how long the first recomputation waits for the second to reach the same point:
# without a lock both get there together; with one, the first gives up waiting
MEET_S = 10.0


def test_two_processes_recomputing_one_campaign_take_turns(
    web_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engines = [make_engine(web_db_url) for _ in range(2)]
    try:
        with session_scope(make_session_factory(engines[0])) as s:
            cid = seed_campaign(s, released=True, episodes_per_cell=2, compute=False).campaign_id

        # both scorings hold still at their first snapshot until the other arrives
        meet = threading.Barrier(2)
        build = analysis_store.build_snapshot

        def build_when_both_are_here(*args: Any, **kwargs: Any) -> Any:
            with contextlib.suppress(threading.BrokenBarrierError):
                meet.wait(MEET_S)
            return build(*args, **kwargs)

        monkeypatch.setattr(analysis_store, "build_snapshot", build_when_both_are_here)
        workers = [SnapshotWorker(make_session_factory(e)) for e in engines]
        for worker in workers:
            worker.request(cid)
        for worker in workers:
            assert worker.wait_idle(WAIT_S)

        runs = [run for worker in workers for run in worker.recent]
        assert len(runs) == 2 and [r.error for r in runs] == [None, None]
        created = sorted(o.stream for r in runs for o in r.outcomes if o.status == "created")
        unchanged = sorted(o.stream for r in runs for o in r.outcomes if o.status == "unchanged")
        assert created and created == unchanged  # each stream scored once, found once
        with session_scope(make_session_factory(engines[0])) as s:
            per_stream = s.execute(
                sa.select(AnalysisSnapshot.label_stream, sa.func.count())
                .where(AnalysisSnapshot.campaign_id == cid)
                .group_by(AnalysisSnapshot.label_stream)
            ).all()
        assert sorted(stream for stream, _ in per_stream) == created
        assert all(n == 1 for _, n in per_stream)
    finally:
        for engine in engines:
            engine.dispose()
