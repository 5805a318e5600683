"""Several stations claiming from one campaign at once, each on its own
database connection (threads), on both backends: nothing is claimed twice
and nothing is lost. On PostgreSQL, also that SKIP LOCKED never makes a
station wait for another's open transaction."""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter

import sqlalchemy as sa

from proctor.core.db.models import Assignment, Episode
from proctor.core.domain import AssignmentStatus, EpisodeState, Outcome
from proctor.scheduler import claims, service
from proctor.scheduler.service import Actor
from tests.backends import only_on
from tests.scheduler import builders
from tests.scheduler.conftest import CommittedDb

STATIONS = 3


def _campaign(db: CommittedDb, n_policies: int, objects: tuple[str, ...], n: int):
    with db.session() as s:
        w = builders.world(s, n_policies, objects=objects)
        c = service.create_campaign(
            s, protocol=builders.protocol(w, episodes_per_cell=n), actor=Actor(label="t")
        )
        service.start_campaign(s, campaign=c.id, actor=Actor(label="t"))
        stations = [builders.station(s).id for _ in range(STATIONS)]
        return c.id, stations


def _station_loop(
    db: CommittedDb,
    campaign_id: int,
    station_id: int,
    barrier: threading.Barrier,
    log: list[str],
    errors: list[BaseException],
) -> None:
    try:
        barrier.wait(timeout=30)
        while True:
            with db.session() as s:
                claim = claims.claim_next(s, campaign_id=campaign_id, station_id=station_id)
            if claim is None:
                return
            log.append(claim.run_code)
            # a station spends its episode's time between claiming and completing; with
            # none, SQLite's unfair write lock can let two busy threads starve the third
            time.sleep(0.005)
            with db.session() as s:
                ep = Episode(
                    uid=secrets.token_hex(8),
                    station_id=station_id,
                    object_type_id=claim.object_type_id,
                    items=claim.items,
                    budget_s=claim.budget_s,
                    tote_side=claim.tote_side,
                    camera_side=claim.camera_side,
                    state=EpisodeState.closed,
                    outcome=Outcome.success,
                    placed=claim.items,
                    lost=0,
                    dropped=0,
                )
                s.add(ep)
                s.flush()
                claims.complete(s, run_code=claim.run_code, episode_id=ep.id, station_id=station_id)
    except BaseException as exc:  # surfaced by the test thread
        errors.append(exc)


def test_parallel_stations_never_share_or_lose_a_slot(committed_db: CommittedDb) -> None:
    campaign_id, stations = _campaign(committed_db, 4, ("spoons", "towels", "cups"), 8)
    barrier = threading.Barrier(len(stations))
    logs: dict[int, list[str]] = {sid: [] for sid in stations}
    errors: list[BaseException] = []
    threads = [
        threading.Thread(
            target=_station_loop,
            args=(committed_db, campaign_id, sid, barrier, logs[sid], errors),
        )
        for sid in stations
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert not any(t.is_alive() for t in threads)

    claimed = [code for log in logs.values() for code in log]
    with committed_db.session() as s:
        rows = s.execute(
            sa.select(Assignment.run_code, Assignment.status, Assignment.station_id).where(
                Assignment.campaign_id == campaign_id
            )
        ).all()
        episodes = Counter(
            s.scalars(
                sa.select(Episode.assignment_id).where(Episode.campaign_id == campaign_id)
            ).all()
        )
    assert len(rows) == 5 * 3 * 8 == 120
    dupes = [code for code, k in Counter(claimed).items() if k > 1]
    assert dupes == []  # nothing claimed twice
    assert sorted(claimed) == sorted(r.run_code for r in rows)  # nothing lost
    assert {r.status for r in rows} == {AssignmentStatus.done}
    assert set(episodes.values()) == {1} and len(episodes) == 120  # one episode per slot
    by_station = {sid: len(log) for sid, log in logs.items()}
    for sid, log in logs.items():  # each station's claims are its own
        assert {r.station_id for r in rows if r.run_code in set(log)} <= {sid}
    assert all(n > 0 for n in by_station.values()), by_station  # they really ran side by side


@only_on("postgresql", fixture="committed_db")  # SQLite serializes (next test)
def test_skip_locked_hands_the_next_slot_without_waiting(committed_db: CommittedDb) -> None:
    campaign_id, (a, b, _) = _campaign(committed_db, 1, ("spoons",), 2)
    first = committed_db.factory()
    second = committed_db.factory()
    try:
        got_a = claims.claim_next(first, campaign_id=campaign_id, station_id=a)  # not committed
        # a station that waited on the other's row lock would hit this timeout
        second.execute(sa.text("SET LOCAL lock_timeout = '500ms'"))
        got_b = claims.claim_next(second, campaign_id=campaign_id, station_id=b)
        assert got_a is not None and got_b is not None
        assert got_a.run_code != got_b.run_code
        second.commit()
        first.rollback()  # station A crashed before committing: its slot is free again
        third = claims.claim_next(first, campaign_id=campaign_id, station_id=a)
        assert third is not None and third.run_code == got_a.run_code
        first.commit()
    finally:
        first.close()
        second.close()


@only_on("sqlite", fixture="committed_db")  # the serialized fallback is SQLite's
def test_sqlite_serializes_claimers(committed_db: CommittedDb) -> None:
    campaign_id, (a, b, _) = _campaign(committed_db, 1, ("spoons",), 2)
    first = committed_db.factory()
    got_a = claims.claim_next(first, campaign_id=campaign_id, station_id=a)  # holds the write lock
    result: list[str] = []

    def other() -> None:
        with committed_db.session() as s:
            claim = claims.claim_next(s, campaign_id=campaign_id, station_id=b)
            result.append(claim.run_code if claim else "")

    t = threading.Thread(target=other)
    t.start()
    t.join(timeout=0.5)
    assert t.is_alive() and result == []  # waiting for the first claimer's commit
    first.commit()
    first.close()
    t.join(timeout=30)
    assert got_a is not None and result and result[0] not in ("", got_a.run_code)


@only_on("postgresql", fixture="committed_db")  # the row-lock modes are PostgreSQL's
def test_settling_a_requeue_does_not_wait_for_another_stations_key_share(
    committed_db: CommittedDb,
) -> None:
    """Every row written under a campaign (a fresh slot, a settled episode)
    takes a KEY SHARE lock on the campaign's row through its foreign key. A
    requeue that then asked for FOR UPDATE on that row waited for every other
    such transaction, and two stations settling interrupted runs at once
    deadlocked (found by ``./run bench stations`` with 8 stations)."""
    campaign_id, (a, _, _) = _campaign(committed_db, 1, ("spoons",), 2)
    with committed_db.session() as s:
        claim = claims.claim_next(s, campaign_id=campaign_id, station_id=a)
        assert claim is not None
    other = committed_db.factory()
    first = committed_db.factory()
    try:
        # another station's transaction, mid-way: its rows point at the campaign
        other.execute(
            sa.text("SELECT id FROM campaigns WHERE id = :c FOR KEY SHARE"), {"c": campaign_id}
        )
        first.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
        ep = Episode(
            uid=secrets.token_hex(8),
            station_id=a,
            object_type_id=claim.object_type_id,
            items=claim.items,
            budget_s=claim.budget_s,
            tote_side=claim.tote_side,
            camera_side=claim.camera_side,
            state=EpisodeState.interrupted,
        )
        first.add(ep)
        first.flush()
        status = claims.complete(first, run_code=claim.run_code, episode_id=ep.id, station_id=a)
        assert status == AssignmentStatus.requeued
        first.commit()
    finally:
        first.close()
        other.rollback()
        other.close()
