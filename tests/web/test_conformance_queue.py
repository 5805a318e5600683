"""Conformance checks as a bounded queue (security review, finding N4): at
most ``max_concurrent_checks`` run at once, at most
``max_concurrent_checks_per_submitter`` of one submitter's, the rest wait
queued and run as places free; a submitter's registrations, uploads and
re-checks are limited per hour (429 with Retry-After)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from proctor.core.db.engine import make_engine, make_session_factory, session_scope
from proctor.core.db.models import ConformanceRun
from proctor.core.domain import ConformanceRunStatus, Role
from proctor.core.settings import load_settings
from proctor.web.submissions import queue, worker
from tests.web.conftest import Web, web_app
from tests.web.submissions_support import (
    begin,
    portal_app,
    portal_settings,
    queued_check,
    submitter,
)

# a deadline on a loaded machine, never the verdict
WAIT_S = 240.0
RUNNING = ConformanceRunStatus.running
QUEUED = ConformanceRunStatus.queued


def _body(url: str, name: str) -> dict[str, Any]:
    return {"policy_name": f"policy-{name}", "url": url, "dialect": "openpi"}


class HoldingListener:
    """A loopback TCP server that accepts, says nothing, and closes each
    connection after ``hold_s``: a check of it takes about that long. It
    counts the connections open at once (each check holds one)."""

    def __init__(self, hold_s: float = 1.0) -> None:
        self.hold_s = hold_s
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.open = 0
        self.most_open = 0
        self.accepted = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with self._lock:
                self.open += 1
                self.accepted += 1
                self.most_open = max(self.most_open, self.open)
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        self._stop.wait(self.hold_s)
        conn.close()
        with self._lock:
            self.open -= 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def portal(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    yield from portal_app(web_db_url, tmp_path)


@pytest.fixture
def listener() -> Iterator[HoldingListener]:
    server = HoldingListener()
    yield server
    server.close()


# -- the cap, through the API ---------------------------------------------------------------
@pytest.fixture
def spawning(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    """The app starting its own workers, two checks at once, of anyone's."""
    settings = portal_settings(
        web_db_url,
        tmp_path,
        conformance_dispatch="subprocess",
        max_concurrent_checks=2,
        max_concurrent_checks_per_submitter=2,
        registrations_per_hour=30,
    )
    yield from web_app(settings)


def test_thirty_concurrent_registrations_run_at_most_the_cap_and_the_rest_queue(
    spawning: Web, listener: HoldingListener
) -> None:
    """The review's repro: 30 registrations at once used to start 30 worker
    processes. Now the app starts a worker only for a run it claimed within
    the cap, and those workers drain the rest, two at a time."""
    h = submitter(spawning)
    workers = spawning.app.state.web.conformance_workers
    seen = {"running": 0, "processes": 0, "queued": 0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            with spawning.db() as s:
                counts = dict(
                    s.execute(
                        sa.select(ConformanceRun.status, sa.func.count()).group_by(
                            ConformanceRun.status
                        )
                    ).all()
                )
            seen["running"] = max(seen["running"], counts.get(RUNNING, 0))
            seen["queued"] = max(seen["queued"], counts.get(QUEUED, 0))
            seen["processes"] = max(seen["processes"], len(workers.running()))
            stop.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    def register(n: int) -> int:
        c = spawning.client()
        r = c.post("/api/submissions/endpoints", json=_body(listener.url, f"q{n}"), headers=h)
        return r.status_code

    try:
        with ThreadPoolExecutor(max_workers=30) as pool:
            codes = list(pool.map(register, range(30)))
        assert codes == [201] * 30
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            with spawning.db() as s:
                left = s.scalar(
                    sa.select(sa.func.count()).where(ConformanceRun.status.in_([QUEUED, RUNNING]))
                )
            if left == 0 and not workers.running():
                break
            assert seen["processes"] <= 2, seen  # fail at once, not after every check
            time.sleep(0.2)
        else:
            raise AssertionError(f"the queue did not drain in {WAIT_S:g} s: {seen}")
    finally:
        stop.set()
        watcher.join(5)
        for child in workers.running():
            child.wait(WAIT_S)
    with spawning.db() as s:
        ends = s.scalars(sa.select(ConformanceRun.status)).all()
    assert len(ends) == 30 and set(ends) <= {ConformanceRunStatus.done}, ends
    assert seen["processes"] <= 2 and seen["running"] <= 2, seen
    assert listener.most_open <= 2 and listener.accepted >= 30, vars(listener)
    assert seen["queued"] >= 20, seen  # the rest waited their turn


# -- the caps, at the claim ---------------------------------------------------------------------
def test_one_submitters_checks_wait_while_anothers_run(portal: Web) -> None:
    a = portal.add_user("sub-a", Role.submitter)
    b = portal.add_user("sub-b", Role.submitter)
    a1, a2, a3 = (queued_check(portal, a) for _ in range(3))
    b1 = queued_check(portal, b)
    caps = queue.Caps(total=2, per_submitter=1)

    def claim() -> int | None:
        with portal.db() as s:
            return queue.claim(s, now=portal.clock(), caps=caps)

    assert claim() == a1
    assert claim() == b1  # a2 is older, but sub-a has a check running
    assert claim() is None  # two run: the rest wait
    with portal.db() as s:
        run = s.get(ConformanceRun, a1)
        assert run is not None
        run.status = ConformanceRunStatus.done
    assert claim() == a2
    assert claim() is None
    with portal.db() as s:
        assert s.get(ConformanceRun, a3).status == QUEUED  # type: ignore[union-attr]


def test_claims_racing_from_many_sessions_keep_the_cap(portal: Web) -> None:
    """Eight claimers at once (each with its own connection, as worker
    processes are), ten submitters' runs queued: two are taken."""
    runs = [queued_check(portal, portal.add_user(f"racer{n}", Role.submitter)) for n in range(10)]
    engine = make_engine(portal.settings.db_url)
    sessions = make_session_factory(engine)
    caps = queue.Caps(total=2, per_submitter=1)
    gate = threading.Barrier(8)

    def race(_: int) -> int | None:
        gate.wait(30)
        with session_scope(sessions) as s:
            return queue.claim(s, now=portal.clock(), caps=caps)

    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            taken = [r for r in pool.map(race, range(8)) if r is not None]
    finally:
        engine.dispose()
    assert len(taken) == 2 and set(taken) <= set(runs), taken


def test_the_worker_drains_the_queue_within_the_caps(portal: Web) -> None:
    """A worker (what the web app spawns, and each lane of the long-lived
    one) takes the next run when its check ends: the queue empties, one
    check at a time for one submitter."""
    owner = portal.add_user("drainer", Role.submitter)
    for _ in range(3):
        queued_check(portal, owner)
    running_at_once: list[int] = []

    def check(url: str, **kwargs: Any) -> Any:
        with portal.db() as s:
            running_at_once.append(
                s.scalar(sa.select(sa.func.count()).where(ConformanceRun.status == RUNNING)) or 0
            )
        raise RuntimeError("no server here")

    outcomes = worker.work(
        portal.app.state.web.session_factory, portal.settings, clock=portal.clock, check=check
    )
    assert [o.verdict for o in outcomes] == ["error"] * 3
    assert running_at_once == [1, 1, 1]


# -- rate limits ----------------------------------------------------------------------------------
@pytest.fixture
def limited(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    settings = portal_settings(
        web_db_url,
        tmp_path,
        registrations_per_hour=3,
        uploads_per_hour=2,
        rechecks_per_hour=1,
    )
    yield from web_app(settings)


def test_registrations_past_the_hours_limit_get_429_naming_it(limited: Web) -> None:
    h = submitter(limited)
    c = limited.client()
    for n in range(3):
        r = c.post(
            "/api/submissions/endpoints", json=_body("ws://127.0.0.1:9/", f"r{n}"), headers=h
        )
        assert r.status_code == 201, r.text
        limited.clock.advance(minutes=10)
    r = c.post("/api/submissions/endpoints", json=_body("ws://127.0.0.1:9/", "r3"), headers=h)
    assert r.status_code == 429, r.text
    detail = r.json()["detail"]
    assert "endpoint registrations" in detail and "submissions.registrations_per_hour" in detail
    # the first of the three leaves the hour 30 minutes from now
    assert r.headers["Retry-After"] == "1800"
    with limited.db() as s:  # nothing was written
        assert s.scalar(sa.select(sa.func.count()).select_from(ConformanceRun)) == 3
    # another submitter is not limited by this one's count
    other = submitter(limited, "grace")
    r = c.post("/api/submissions/endpoints", json=_body("ws://127.0.0.1:9/", "g"), headers=other)
    assert r.status_code == 201
    limited.clock.advance(minutes=30)
    r = c.post("/api/submissions/endpoints", json=_body("ws://127.0.0.1:9/", "r3"), headers=h)
    assert r.status_code == 201, r.text


def test_rechecks_and_uploads_past_the_hours_limit_get_429(limited: Web) -> None:
    h = submitter(limited)
    c = limited.client()
    r = c.post("/api/submissions/endpoints", json=_body("ws://127.0.0.1:9/", "rc"), headers=h)
    sid = r.json()["id"]
    sessions = limited.app.state.web.session_factory

    def fail(url: str, **kwargs: Any) -> Any:
        raise RuntimeError("no server here")

    worker.work(sessions, limited.settings, clock=limited.clock, check=fail)
    assert c.post(f"/api/submissions/{sid}/check", headers=h).status_code == 202
    worker.work(sessions, limited.settings, clock=limited.clock, check=fail)
    r = c.post(f"/api/submissions/{sid}/check", headers=h)
    assert r.status_code == 429 and "Retry-After" in r.headers
    assert "conformance checks asked for again" in r.json()["detail"]
    assert "submissions.rechecks_per_hour" in r.json()["detail"]

    for n in range(2):
        assert begin(c, h, b"x" * 100, filename=f"c{n}.tar.gz").status_code == 201
    r = begin(c, h, b"x" * 100, filename="c2.tar.gz")
    assert r.status_code == 429 and "Retry-After" in r.headers
    assert "checkpoint uploads" in r.json()["detail"]


# -- the default dispatch -----------------------------------------------------------------------
def test_servers_run_checks_in_the_long_lived_worker_by_default(tmp_path: Path) -> None:
    prod = load_settings(env="prod", data_dir=tmp_path, secret_key="k" * 48)
    assert prod.submissions.conformance_dispatch == "worker"
    dev = load_settings(env="dev", data_dir=tmp_path)
    assert dev.submissions.conformance_dispatch == "subprocess"
    explicit = load_settings(
        env="prod",
        data_dir=tmp_path,
        secret_key="k" * 48,
        submissions={"conformance_dispatch": "subprocess"},
    )
    assert explicit.submissions.conformance_dispatch == "subprocess"
