"""The web app's "after the request commits" hooks (snapshot recomputation,
the conformance worker, removing a discarded upload's staged file) on a
transaction that rolls back: nothing happens, and the rollback itself
raises nothing (SQLAlchemy calls ``after_soft_rollback`` listeners with the
transaction as well as the session)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from proctor.web.snapshots import worker as snapshot_worker
from proctor.web.submissions import queue, uploads
from tests.web.conftest import Web


def _begun(web: Web):  # a session inside a real transaction
    s = web.app.state.web.session_factory()
    s.execute(sa.text("SELECT 1"))
    return s


def test_rolled_back_hooks_do_nothing_and_raise_nothing(web: Web, tmp_path: Path) -> None:
    staged = tmp_path / "upload.part"
    staged.write_bytes(b"partial")
    settings = web.app.state.web.settings.model_copy(deep=True)
    settings.submissions.conformance_dispatch = "subprocess"
    with _begun(web) as s:
        snapshot_worker.recompute_after_commit(s, campaign_id=1)
        queue.dispatch_after_commit(s, settings=settings, run_id=1)
        uploads._remove_after_commit(s, staged)
        # a savepoint rolled back inside the request leaves its registrations alone
        s.begin_nested().rollback()
        assert set(s.info) >= {
            snapshot_worker._PENDING_KEY,
            queue._PENDING_KEY,
            uploads._CLEANUP_KEY,
        }
        s.rollback()
        assert not {snapshot_worker._PENDING_KEY, queue._PENDING_KEY, uploads._CLEANUP_KEY} & set(
            s.info
        )
    assert staged.read_bytes() == b"partial"
    worker = web.app.state.web.snapshot_worker
    assert worker.wait_idle(30) and worker.status().recent == []


def test_a_committed_cleanup_removes_the_staged_file(web: Web, tmp_path: Path) -> None:
    staged = tmp_path / "upload.part"
    staged.write_bytes(b"partial")
    with _begun(web) as s:
        uploads._remove_after_commit(s, staged)
        s.commit()
    assert not staged.exists()
