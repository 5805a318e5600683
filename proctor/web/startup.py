"""What the web server puts right when it starts, after a crash or a kill.

A process that dies mid-work leaves state behind that nothing else would
repair. Run once by the app's lifespan, before the first request:

* **stale boards**: the snapshot recomputation a review queued lives in
  memory (the app's ``snapshot_worker``) and dies with the process, so campaigns
  whose latest snapshot no longer matches their data are queued again;
* **artifact store leftovers**: temporary files of writes that never
  finished (``artifacts/tmp``), once untouched for ``TEMP_SAFE_AGE_S`` (a
  station or worker process may be writing one right now);
* **abandoned uploads**: expired upload rows and staged files with no row
  (``uploads.expire_uploads``, which leaves young orphans to a create in
  progress in another process).

Each step is independent: one that fails is logged and the others still
run; the server starts either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from proctor.analysis.store import stale_campaigns
from proctor.core.db.engine import session_scope
from proctor.web.state import AppState
from proctor.web.submissions.uploads import expire_uploads

log = logging.getLogger(__name__)

# a temporary file untouched this long has no writer left: the artifact store
# writes and fsyncs as it goes, so a live write keeps its file's mtime fresh
TEMP_SAFE_AGE_S = 3600.0


def requeue_stale_snapshots(state: AppState) -> int:
    with session_scope(state.session_factory) as session:
        stale = stale_campaigns(session)
    for campaign_id in stale:
        state.snapshot_worker.request(campaign_id)
    if stale:
        log.info("start-up: recomputing the stale snapshots of campaigns %s", stale)
    return len(stale)


def clean_store_temporary(state: AppState) -> int:
    removed = state.store.clean_temporary(older_than_s=TEMP_SAFE_AGE_S)
    if removed:
        log.info("start-up: removed %d unfinished artifact write(s)", removed)
    return removed


def clean_uploads(state: AppState) -> int:
    with session_scope(state.session_factory) as session:
        removed = expire_uploads(session, settings=state.settings, now=state.clock())
    if removed:
        log.info("start-up: removed %d abandoned upload(s)", removed)
    return removed


STEPS: tuple[Callable[[AppState], int], ...] = (
    requeue_stale_snapshots,
    clean_store_temporary,
    clean_uploads,
)


def recover(state: AppState) -> None:
    for step in STEPS:
        try:
            step(state)
        except Exception:  # the server must start even if one repair cannot run
            log.exception("start-up step %s failed", step.__name__)
