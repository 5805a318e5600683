"""Two apps in one process share nothing they keep in memory (``proctor.web.state``):
not the parsed results and pages, the artifact caches, the ``.rrd`` build
locks, the snapshot worker, the shared cache's count of local writes, the
conformance worker processes or health's threads. Each app here has a
database and an artifact store of its own, as two servers restored from one
backup would; shutting one down stops only its own worker."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from proctor.core.db.engine import make_engine, make_session_factory, session_scope
from proctor.core.db.models import AnalysisSnapshot, Campaign, Episode
from proctor.core.domain import Role
from proctor.core.settings import load_settings
from proctor.web.snapshots import worker as snapshot_worker
from proctor.web.submissions import queue
from tests.web.cache_support import cache_of
from tests.web.conftest import FakeClock, TemplateDatabases, Web
from tests.web.leaderboard_data import SeededCampaign, seed_campaign
from tests.web.recordings import RecordingSpec, attach_recording
from tests.web.submissions_support import queued_check

# how long a condition may take on a loaded machine: a deadline, never the verdict
WAIT_S = 120.0
SPEC = RecordingSpec(duration_s=20.0, fps=5, width=160, height=120, telemetry_hz=50.0)
PER_APP = (
    "results",
    "artifact_cache",
    "rrd_locks",
    "snapshot_worker",
    "local_commits",
    "conformance_workers",
    "health_threads",
)


@pytest.fixture
def two_apps(
    backend: str, web_template_dbs: TemplateDatabases, tmp_path: Path
) -> Iterator[tuple[Web, Web]]:
    from proctor.web.app import create_app

    apps: list[Web] = []
    urls: list[str] = []
    try:
        for name in ("a", "b"):
            urls.append(web_template_dbs.copy(backend))
            (tmp_path / name).mkdir()
            settings = load_settings(
                env="test",
                data_dir=tmp_path / name,
                database_url=urls[-1],
                secret_key="test-secret-key-" + "x" * 32,
            )
            clock = FakeClock()
            apps.append(Web(app=create_app(settings, clock=clock), clock=clock, settings=settings))
        yield apps[0], apps[1]
    finally:
        for web in apps:
            for c in web.clients:
                c.close()
            web.app.state.web.engine.dispose()
        for url in urls:
            web_template_dbs.drop(url)


def _released(web: Web, seed: int) -> SeededCampaign:
    with web.db() as s:
        return seed_campaign(s, released=True, episodes_per_cell=2, seed=seed)


def _snapshot_result(web: Web, campaign_id: int) -> dict[str, Any]:
    with web.db() as s:
        return s.scalars(
            sa.select(AnalysisSnapshot.result)
            .where(AnalysisSnapshot.campaign_id == campaign_id)
            .order_by(AnalysisSnapshot.id.desc())
        ).first()


def test_each_app_holds_its_own_state(two_apps: tuple[Web, Web]) -> None:
    a, b = (w.app.state.web for w in two_apps)
    for name in PER_APP:
        assert getattr(a, name) is not getattr(b, name), name
    # the after-commit hooks find their app's worker and processes in the session
    with two_apps[0].db() as s:
        assert s.info[snapshot_worker.WORKER_KEY] is a.snapshot_worker
        assert s.info[queue.WORKERS_KEY] is a.conformance_workers


def test_results_one_app_read_are_not_the_other_apps(two_apps: tuple[Web, Web]) -> None:
    """The caches are keyed without the database (each app has one), so two
    databases whose snapshots have the same ids must still each show their own."""
    a, b = two_apps
    seeded_a, seeded_b = _released(a, seed=5), _released(b, seed=6)
    assert seeded_a.campaign_id == seeded_b.campaign_id  # same ids, different data
    cid = seeded_a.campaign_id
    assert _snapshot_result(a, cid) != _snapshot_result(b, cid)
    board_a = a.client().get(f"/api/leaderboard/{cid}").json()
    assert len(a.app.state.web.results._items) > 0
    assert len(b.app.state.web.results._items) == 0
    board_b = b.client().get(f"/api/leaderboard/{cid}").json()
    assert board_a["snapshot"]["id"] == board_b["snapshot"]["id"]
    assert board_a["rows"] != board_b["rows"]
    # and the full result each serves is its own database's (policy names carry a
    # random tag per seeding)
    for web in two_apps:
        served = web.client().get(f"/api/leaderboard/{cid}/snapshot").json()
        stored = _snapshot_result(web, cid)
        assert {p["policy"] for p in served["policies"]} == {
            p["policy"] for p in stored["policies"]
        }


def test_a_write_through_one_app_leaves_the_others_shared_cache_alone(
    two_apps: tuple[Web, Web],
) -> None:
    """Before, one process-wide count of local writes made every app's
    shared cache read its generation row again after any app's write."""
    a, b = two_apps
    cid = _released(b, seed=7).campaign_id
    cache_b = cache_of(b)
    cache_b.watcher.check_s = 3600.0  # only a write of b's own makes it read again
    url = f"/api/leaderboard/{cid}"
    b.client().get(url)
    b.client().get(url)
    reads, hits = cache_b.watcher.reads, cache_b.hits
    assert hits >= 1
    with a.db() as s:  # a write through the other app
        s.execute(sa.update(Campaign).values(description="re-described in a"))
    b.client().get(url)
    assert (cache_b.watcher.reads, cache_b.hits) == (reads, hits + 1)
    commits_a, commits_b = a.app.state.web.local_commits, b.app.state.web.local_commits
    before = commits_b.value
    with a.db() as s:
        s.execute(sa.update(Campaign).values(description="again in a"))
    assert commits_b.value == before and commits_a.value > 0
    with b.db() as s:  # a write through b itself: read again at once, page rebuilt
        s.execute(sa.update(Campaign).values(description="re-described in b"))
    b.client().get(url)
    assert (cache_b.watcher.reads, cache_b.hits) == (reads + 1, hits + 1)


def test_artifact_caches_are_the_apps_own(two_apps: tuple[Web, Web], tmp_path: Path) -> None:
    a, b = two_apps
    uid = _recorded(a, tmp_path, seed=11)
    cache_a, cache_b = a.app.state.web.artifact_cache, b.app.state.web.artifact_cache
    r = a.client().get(f"/api/episodes/{uid}/telemetry")
    assert r.status_code == 200
    assert len(cache_a.tables._tables) == 1 and len(cache_a.json._items) == 1
    assert len(cache_b.tables._tables) == 0 and len(cache_b.json._items) == 0


def _recorded(web: Web, tmp_path: Path, *, seed: int, uid: str | None = None) -> str:
    """A released campaign with one recorded episode (given ``uid``, if any)."""
    seeded = _released(web, seed=seed)
    episode_uid = seeded.episode_uids[0]
    if uid is not None:
        with web.db() as s:
            s.execute(sa.update(Episode).where(Episode.uid == episode_uid).values(uid=uid))
        episode_uid = uid
    attach_recording(
        sessions=web.app.state.web.session_factory,
        store=web.app.state.web.store,
        uid=episode_uid,
        spool=tmp_path / f"spool-{id(web)}-{episode_uid}",
        spec=SPEC,
        seed=seed,
    )
    return episode_uid


def test_an_rrd_build_in_one_app_does_not_hold_up_the_others(
    two_apps: tuple[Web, Web], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both databases have an episode of the same uid. While a's build of it
    is held inside, b builds its own: the lock is a's, not the process's."""
    pytest.importorskip("rerun", reason="the rerun extra is part of ./run test")
    from proctor.web.explorer import export

    a, b = two_apps
    uid = _recorded(a, tmp_path, seed=12)
    _recorded(b, tmp_path, seed=13, uid=uid)
    entered, release = threading.Event(), threading.Event()
    build = export.build_rrd
    first = threading.Lock()

    def held_build(*args: Any, **kwargs: Any) -> Any:
        if first.acquire(blocking=False):  # the first build (a's) waits inside its lock
            entered.set()
            release.wait(WAIT_S)
        return build(*args, **kwargs)

    monkeypatch.setattr(export, "build_rrd", held_build)
    answers: dict[str, int] = {}

    def get(web: Web, name: str) -> None:
        web.add_user(f"sam{name}", Role.submitter)
        token = web.token(f"sam{name}", ("submitter",))
        r = web.client().get(
            f"/api/episodes/{uid}/rrd", headers={"Authorization": f"Bearer {token}"}
        )
        answers[name] = r.status_code

    in_a = threading.Thread(target=get, args=(a, "a"))
    in_a.start()
    try:
        assert entered.wait(WAIT_S), "a's build never started"
        assert len(a.app.state.web.rrd_locks) == 1 and len(b.app.state.web.rrd_locks) == 0
        in_b = threading.Thread(target=get, args=(b, "b"))
        in_b.start()
        in_b.join(WAIT_S)
        assert not in_b.is_alive(), "b's build waited for a's lock"
        assert answers["b"] == 200 and "a" not in answers
    finally:
        release.set()
        in_a.join(WAIT_S)
    assert answers["a"] == 200
    assert len(a.app.state.web.rrd_locks) == 0  # a lock lives while it is held


def test_conformance_workers_are_the_apps_that_started_them(two_apps: tuple[Web, Web]) -> None:
    a, b = two_apps
    settings = a.settings.model_copy(deep=True)
    settings.submissions.conformance_dispatch = "subprocess"
    # a check of a closed port: its worker fails it quickly and ends
    run_id = queued_check(a, a.add_user("iso-submitter", Role.submitter))
    with a.db() as s:
        queue.dispatch_after_commit(s, settings=settings, run_id=run_id)
    # a Python process that imports the project takes far longer to end than this
    [child] = a.app.state.web.conformance_workers.running()
    assert b.app.state.web.conformance_workers.running() == []
    assert child.wait(WAIT_S) == 0


def test_a_session_of_no_app_cannot_queue_app_work(two_apps: tuple[Web, Web]) -> None:
    """The hooks need the app's worker; a session of any other factory is
    refused when the work is asked for, not dropped silently at its commit."""
    a, _ = two_apps
    settings = a.settings.model_copy(deep=True)
    settings.submissions.conformance_dispatch = "subprocess"
    engine = make_engine(a.settings.db_url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            with pytest.raises(RuntimeError, match="not opened by the web app"):
                snapshot_worker.recompute_after_commit(s, campaign_id=1)
            with pytest.raises(RuntimeError, match="not opened by the web app"):
                queue.dispatch_after_commit(s, settings=settings, run_id=1)
    finally:
        engine.dispose()


def test_shutting_one_app_down_stops_only_its_worker(two_apps: tuple[Web, Web]) -> None:
    from fastapi.testclient import TestClient

    a, b = two_apps
    cid_a, cid_b = _released(a, seed=8).campaign_id, _released(b, seed=9).campaign_id
    worker_a, worker_b = a.app.state.web.snapshot_worker, b.app.state.web.snapshot_worker
    with TestClient(a.app) as client:  # start-up and shut-down, as a server runs them
        assert client.get("/api/health").status_code == 200
    assert worker_a.closed and not worker_b.closed
    assert worker_a.wait_idle(WAIT_S)
    ran = len(worker_a.status().recent)
    worker_a.request(cid_a)  # a's work after its shutdown: not taken
    assert worker_a.status().pending == [] and worker_a.wait_idle(WAIT_S)
    assert len(worker_a.status().recent) == ran
    worker_b.request(cid_b)  # b works on
    assert worker_b.wait_idle(WAIT_S)
    [run] = worker_b.status().recent
    assert run.campaign_id == cid_b and run.error is None


# constructors of state a module must not hold: every app builds its own (proctor/web/state.py)
STATEFUL_CALLS = {
    "Lock",
    "RLock",
    "Condition",
    "Semaphore",
    "BoundedSemaphore",
    "Event",
    "CapacityLimiter",
    "defaultdict",
    "OrderedDict",
    "deque",
    "WeakKeyDictionary",
    "WeakValueDictionary",
    "WeakSet",
    "Counter",
    "set",
    "dict",
    "list",
}
STATEFUL_SUFFIXES = ("Cache", "Worker", "Workers", "Locks", "Commits")


def _module_state(path: Path) -> list[str]:
    import ast

    found = []
    for node in ast.parse(path.read_text()).body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if not isinstance(value, ast.Call):
            continue
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in STATEFUL_CALLS or name.endswith(STATEFUL_SUFFIXES):
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_module_of_the_web_or_its_services_holds_process_state() -> None:
    """A cache, worker, lock or registry built at import would be shared by
    every app in the process: it belongs on AppState. (Module constants —
    dicts and sets written once — are not calls and pass.)"""
    root = Path(__file__).resolve().parents[2]
    found = [
        hit
        for package in ("web", "scheduler", "annotator")
        for path in sorted((root / package).rglob("*.py"))
        for hit in _module_state(path)
    ]
    assert found == []
