"""What one app instance holds: built by ``create_app`` and kept on
``app.state.web``; routes reach it through the dependencies in ``proctor.web.deps``.

Everything an app keeps in memory lives here, not in module globals: its
caches, its background worker, its locks and the processes it starts. Two
apps in one process (tests, benchmarks, a demo beside a server) share none
of it, and shutting one down stops only its own worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import anyio
from fastapi.templating import Jinja2Templates
from sqlalchemy.engine import Engine
from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.settings import Settings
from proctor.scheduler.station_sweeps import StationSweep
from proctor.web.artifacts.service import ArtifactCache
from proctor.web.auth.passwords import Passwords
from proctor.web.auth.throttle import ThrottlePolicy
from proctor.web.explorer.export import EpisodeLocks
from proctor.web.shared_cache import LocalCommits
from proctor.web.snapshots.service import ResultCache
from proctor.web.snapshots.subset_work import SubsetWork
from proctor.web.snapshots.worker import SnapshotWorker
from proctor.web.submissions.queue import ConformanceWorkers

Clock = Callable[[], datetime]


@dataclass
class AppState:
    settings: Settings
    engine: Engine
    # /api/health's: no pool, so it never waits behind the requests (proctor.web.limits)
    health_engine: Engine
    # its sessions carry the app's snapshot worker and conformance workers in
    # ``info`` (the after-commit hooks find them there) and count their writing
    # commits into ``local_commits``
    session_factory: sessionmaker[ProctorSession]
    store: ArtifactStore
    templates: Jinja2Templates
    passwords: Passwords
    secret_key: str
    clock: Clock
    throttle: ThrottlePolicy
    static_version: str
    # parsed snapshot results, the views and public pages made of them
    # (proctor.web.snapshots.service)
    results: ResultCache
    # filtered leaderboards: their own cache and a few permits to compute them
    # (proctor.web.snapshots.subset_work)
    subsets: SubsetWork
    # parsed Parquet artifacts and the JSON served from them (proctor.web.artifacts.service)
    artifact_cache: ArtifactCache
    # one lock per episode whose .rrd is being built (proctor.web.explorer.export)
    rrd_locks: EpisodeLocks
    # background snapshot recomputation; closed when the app shuts down
    # (proctor.web.snapshots.worker)
    snapshot_worker: SnapshotWorker
    # the app's own writing commits, for the shared cache's watcher (proctor.web.shared_cache)
    local_commits: LocalCommits
    # the conformance check processes the app started (proctor.web.submissions.queue)
    conformance_workers: ConformanceWorkers
    # /api/health's threads: it answers while requests hold every other one (proctor.web.system)
    health_threads: anyio.CapacityLimiter
    # lapsed claims and abandoned uploads, swept on a thread of its own while
    # the app runs (proctor.scheduler.station_sweeps)
    station_sweep: StationSweep
    # every path this app routes (its surface's, proctor.web.app.SURFACES): the
    # layout links only to these (proctor.web.templating)
    served_paths: frozenset[str] = frozenset()
