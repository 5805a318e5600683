"""The station API (``/api/station/v1``), server side, over HTTP into the real
app on both databases: a station proven by its own ``pst_`` token says
hello, claims blinded work (idempotently), abandons a run, and syncs its
episodes by revision; a revoked station's claim is released after the lease;
and a station token opens nothing but the station API."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from proctor.core import station_credentials
from proctor.core.audit import Actor
from proctor.core.db.models import (
    Assignment,
    AuditLog,
    Episode,
    EpisodeEvent,
    Station,
    StationRequest,
)
from proctor.core.domain import AssignmentStatus, Role
from proctor.core.errors import ConfigError, FieldConflict
from proctor.core.settings import Settings, load_settings
from proctor.core.station_api_wire import EpisodeWire, HelloReply, WorkWire
from proctor.scheduler import service, station_sweeps
from proctor.scheduler.station_api import once, release_lapsed_claims, sync_episode
from tests.scheduler import builders
from tests.web.conftest import Web, login

API = "/api/station/v1"
LEASE_S = 30.0
PREFLIGHT_RETRY_S = 7.0  # not the 300 s default: the route must pass the setting on
LAYOUT = "ab" * 32


@pytest.fixture
def web_settings(web_db_url: str, tmp_path: Path) -> Settings:
    # a short lease, so the test's clock need not move far
    return load_settings(
        env="test",
        data_dir=tmp_path,
        database_url=web_db_url,
        secret_key="test-secret-key-" + "x" * 32,
        # the sweep's thread runs only where a test starts the app (its lifespan)
        scheduler={
            "claim_lease_s": LEASE_S,
            "station_sweep_s": 1.0,
            "preflight_retry_s": PREFLIGHT_RETRY_S,
        },
    )


@dataclass
class Setup:
    campaign_id: int
    world: builders.World
    tokens: dict[str, str]  # station name -> its token
    ids: dict[str, int]

    def secrets(self) -> list[str]:
        out = [p.name for p in self.world.arms]
        out += [u.username for u in self.world.owners.values()]
        out += [s.endpoint_url for s in self.world.submissions.values() if s.endpoint_url]
        return out


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def keyed(token: str, key: str) -> dict[str, str]:
    return {**bearer(token), "Idempotency-Key": key}


@pytest.fixture
def setup(web: Web) -> Setup:
    with web.db() as s:
        w = builders.world(s, 2)
        c = service.create_campaign(
            s, protocol=builders.protocol(w), actor=Actor(label="test-admin")
        )
        service.start_campaign(s, campaign=c.id, actor=Actor(label="test-admin"))
        tokens, ids = {}, {}
        for name in ("cell-a", "cell-b"):
            st, token = builders.enrolled_station(s, name)
            tokens[name], ids[name] = token, st.id
        return Setup(c.id, w, tokens, ids)


def hello_body(station: str, **kw: Any) -> dict[str, Any]:
    return {
        "station": station,
        "profile": "sim",
        "layout_hash": LAYOUT,
        "software_version": "proctor 1.2.3",
        "station_time": "2031-05-04T09:00:00Z",
        **kw,
    }


def claim(web: Web, setup: Setup, station: str, key: str) -> dict[str, Any]:
    r = web.client().post(
        f"{API}/claims",
        json={"campaign": setup.campaign_id},
        headers=keyed(setup.tokens[station], key),
    )
    assert r.status_code == 200, r.text
    return r.json()


def episode_body(work: dict[str, Any], uid: str, rev: int, **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "uid": uid,
        "rev": rev,
        "run_code": work["run_code"],
        "object": work["object"],
        "items": work["items"],
        "budget_s": work["items"] * work["per_item_cap_s"],
        "tote_side": work["tote_side"],
        "camera_side": work["camera_side"],
        "state": "armed",
        "events": [],
    }
    body.update(kw)
    return body


def event(seq: int, kind: str = "note", at: str = "2031-05-04T09:00:00+00:00") -> dict[str, Any]:
    return {"seq": seq, "at": at, "kind": kind, "message": f"event {seq}"}


def put(web: Web, setup: Setup, station: str, body: dict[str, Any], uid: str | None = None):
    return web.client().put(
        f"{API}/episodes/{uid or body['uid']}", json=body, headers=bearer(setup.tokens[station])
    )


def fields_of(r: Any) -> list[str]:
    detail = r.json()["detail"]
    assert isinstance(detail, list), detail
    return [d["loc"][-1] for d in detail]


def assignment(web: Web, run_code: str) -> tuple[AssignmentStatus, int | None, Any]:
    with web.db() as s:
        a = s.scalars(sa.select(Assignment).where(Assignment.run_code == run_code)).one()
        return a.status, a.station_id, a.completed_at


# -- hello -----------------------------------------------------------------------------


def test_hello_writes_the_station_row_and_answers_the_clock(web: Web, setup: Setup) -> None:
    c = web.client()
    token = setup.tokens["cell-a"]
    body = hello_body("cell-a", site="lab-1", cell_profile="droid-fr3", clock_offset_s=-1.5)
    r = c.post(f"{API}/hello", json=body, headers=bearer(token))
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["station_id"] == setup.ids["cell-a"]
    assert datetime.fromisoformat(reply["server_time"]) == web.clock()
    assert (reply["heartbeat_s"], reply["lease_s"]) == (10.0, LEASE_S)
    with web.db() as s:
        st = s.get(Station, setup.ids["cell-a"])
        assert (st.site, st.cell_profile, st.software_version, st.layout_hash) == (
            "lab-1",
            "droid-fr3",
            "proctor 1.2.3",
            LAYOUT,
        )
        assert (st.clock_offset_s, st.last_seen_at) == (-1.5, web.clock())

    # another station's name: 403 naming the field
    wrong = c.post(f"{API}/hello", json=hello_body("cell-b"), headers=bearer(token))
    assert wrong.status_code == 403 and fields_of(wrong) == ["station"]
    # a bad label or an unknown field: 422 naming it
    bad = c.post(f"{API}/hello", json=hello_body("cell-a", site="Lab 1"), headers=bearer(token))
    assert bad.status_code == 422 and "site" in fields_of(bad)
    extra = c.post(f"{API}/hello", json=hello_body("cell-a", colour=1), headers=bearer(token))
    assert extra.status_code == 422 and "colour" in fields_of(extra)
    nul = c.post(
        f"{API}/hello", json=hello_body("cell-a", software_version="1\x00"), headers=bearer(token)
    )
    assert nul.status_code == 422 and fields_of(nul) == ["software_version"]


def test_only_a_live_station_token_is_let_in(web: Web, setup: Setup) -> None:
    c = web.client()
    web.add_user("root", Role.admin)
    user_token = web.token("root", ("admin",))
    with web.db() as s:
        station_credentials.revoke(s, name="cell-b", actor=Actor(label="test-admin"))
    refused = "a live station token is required (Authorization: Bearer pst_…)"
    others = ({"Authorization": "Basic " + setup.tokens["cell-a"]}, {"Authorization": "Bearer "})
    for headers in (
        {},
        bearer(user_token),
        bearer(setup.tokens["cell-b"]),
        bearer("pst_x" * 9),
        *others,
    ):
        r = c.post(f"{API}/hello", json=hello_body("cell-b"), headers=headers)
        assert r.status_code == 401, (headers, r.text)
        # one answer whichever way the token is wrong: the caller cannot tell which
        assert r.json() == {"detail": refused}
        assert r.headers["www-authenticate"] == "Bearer"
        r = c.post(
            f"{API}/claims", json={"campaign": 1}, headers={**headers, "Idempotency-Key": "k"}
        )
        assert r.status_code == 401


def test_openapi_says_the_station_routes_need_a_station_token(web: Web) -> None:
    """A reader of the spec (or a client generator) learns that every
    station operation takes ``Authorization: Bearer pst_…``, and that no
    other operation does."""
    spec = web.client().get("/api/openapi.json").json()
    scheme = spec["components"]["securitySchemes"]["stationToken"]
    assert scheme["type"] == "http" and scheme["scheme"] == "bearer"
    assert "proctor station enrol" in scheme["description"]
    methods = {"get", "head", "post", "put", "patch", "delete"}
    station, other = 0, 0
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            if method not in methods:
                continue
            names = {name for requirement in op.get("security", []) for name in requirement}
            if path.startswith(f"{API}/"):
                station += 1
                assert names == {"stationToken"}, (method, path, names)
            else:
                other += 1
                assert "stationToken" not in names, (method, path, names)
    assert station >= 8 and other > station


def test_a_station_token_is_no_user_credential(web: Web, setup: Setup) -> None:
    work = claim(web, setup, "cell-a", "claim:1")["work"]
    assert put(web, setup, "cell-a", episode_body(work, "uidAAAA1", 1)).status_code == 200
    c = web.client()
    station = bearer(setup.tokens["cell-a"])
    for path in (
        "/api/campaigns",
        f"/api/campaigns/{setup.campaign_id}",
        f"/api/leaderboard/{setup.campaign_id}",
        "/api/episodes/uidAAAA1",
        "/api/me",
        "/api/stations/cell-a/tokens",
    ):
        r = c.get(path, headers=station)
        assert r.status_code in (401, 403), (path, r.status_code)
        assert "cell-a" not in r.text or path.startswith("/api/stations")


# -- claims ----------------------------------------------------------------------------


def test_a_claim_is_blinded_and_a_repeated_key_acts_once(web: Web, setup: Setup) -> None:
    first = claim(web, setup, "cell-a", "claim:1")
    work = first["work"]
    assert work is not None and work["gateway_path"].startswith("/policy/")
    assert work["teleop_url"] is None and work["campaign_id"] == setup.campaign_id
    assert work["object_display_name"] and work["object_prompt"].startswith("put the ")
    text = json.dumps(first)
    assert [x for x in setup.secrets() if x in text] == []
    assert not {"policy", "policy_id", "submission_id", "owner", "endpoint_url"} & set(work)
    with web.db() as s:
        a = s.scalars(sa.select(Assignment).where(Assignment.run_code == work["run_code"])).one()
        # its only numbers are the campaign's id, the items, the cap and the scene seed
        numbers = {k for k, v in work.items() if isinstance(v, int | float)}
        assert numbers == {"campaign_id", "items", "per_item_cap_s", "sim_seed"}
        assert a.submission_id is not None and set(work) == set(WorkWire.model_fields)
        assert work["gateway_path"] == f"/policy/{a.endpoint_handle}"

    # the run is finished and settled; the same key gets the first answer, claims nothing
    body = episode_body(
        work, "uidAAAA1", 1, state="closed", outcome="success", placed=work["items"]
    )
    body.update(lost=0, dropped=0)
    assert put(web, setup, "cell-a", body).json()["settled"] is True
    again = claim(web, setup, "cell-a", "claim:1")
    assert again == first
    with web.db() as s:
        held = s.scalar(
            sa.select(sa.func.count()).where(Assignment.status == AssignmentStatus.claimed)
        )
    assert held == 0
    # a new key claims the next run
    assert claim(web, setup, "cell-a", "claim:2")["work"]["run_code"] != work["run_code"]

    c = web.client()
    token = setup.tokens["cell-a"]
    missing = c.post(f"{API}/claims", json={"campaign": setup.campaign_id}, headers=bearer(token))
    assert missing.status_code == 422 and fields_of(missing) == ["Idempotency-Key"]
    odd = c.post(f"{API}/claims", json={"campaign": setup.campaign_id}, headers=keyed(token, "a b"))
    assert odd.status_code == 422 and fields_of(odd) == ["Idempotency-Key"]
    reused = c.post(
        f"{API}/claims/{work['run_code']}/abandon",
        json={"reason": "x"},
        headers=keyed(token, "claim:1"),
    )
    assert reused.status_code == 409 and fields_of(reused) == ["Idempotency-Key"]


def test_a_closed_campaign_hands_out_nothing(web: Web, setup: Setup) -> None:
    with web.db() as s:
        service.close_campaign(s, campaign=setup.campaign_id, actor=Actor(label="test-admin"))
    reply = claim(web, setup, "cell-a", "claim:1")
    assert reply["work"] is None and "closed" in reply["reason"]
    for ref in (2**40, "99999999999", "²", "no-such-campaign"):
        r = web.client().post(
            f"{API}/claims", json={"campaign": ref}, headers=keyed(setup.tokens["cell-a"], "c:2")
        )
        assert r.status_code == 404, (ref, r.text)


def test_abandon_reschedules_and_only_the_holder_may(web: Web, setup: Setup) -> None:
    work = claim(web, setup, "cell-a", "claim:1")["work"]
    code = work["run_code"]
    c = web.client()
    other = c.post(
        f"{API}/claims/{code}/abandon",
        json={"reason": "policy unreachable"},
        headers=keyed(setup.tokens["cell-b"], "abandon:1"),
    )
    assert other.status_code == 403 and fields_of(other) == ["run_code"]
    assert assignment(web, code)[0] == AssignmentStatus.claimed
    r = c.post(
        f"{API}/claims/{code}/abandon",
        json={"reason": "policy unreachable"},
        headers=keyed(setup.tokens["cell-a"], "abandon:1"),
    )
    assert r.status_code == 200 and r.json() == {"run_code": code, "rescheduled": True}
    assert assignment(web, code)[0] == AssignmentStatus.skipped
    replay = c.post(
        f"{API}/claims/{code}/abandon",
        json={"reason": "policy unreachable"},
        headers=keyed(setup.tokens["cell-a"], "abandon:1"),
    )
    assert replay.status_code == 200 and replay.json() == r.json()
    (row,) = web.audit("assignment.preflight_failed")
    assert row[-1]["retry_after_s"] == PREFLIGHT_RETRY_S  # scheduler.preflight_retry_s


# -- episodes --------------------------------------------------------------------------


def test_episode_sync_keeps_the_newest_revision_and_each_event_once(web: Web, setup: Setup) -> None:
    work = claim(web, setup, "cell-a", "claim:1")["work"]
    uid = "uidSYNC01"
    armed = episode_body(work, uid, 1, events=[event(0, "armed")], clock_offset_s=2.5)
    for _ in range(2):
        r = put(web, setup, "cell-a", armed)
        assert r.status_code == 200, r.text
        assert r.json() == {"uid": uid, "rev": 1, "state": "armed", "settled": False}
    running = episode_body(
        work,
        uid,
        2,
        state="running",
        started_at="2031-05-04T09:00:10Z",
        clock_start_s=100.0,
        events=[event(0, "armed"), event(1, "started", "2031-05-04T09:00:10Z")],
        clock_offset_s=2.5,
    )
    assert put(web, setup, "cell-a", running).json()["rev"] == 2
    # an older snapshot arriving late changes nothing
    late = put(web, setup, "cell-a", armed)
    assert late.json() == {"uid": uid, "rev": 2, "state": "running", "settled": False}
    with web.db() as s:
        eps = s.scalars(sa.select(Episode).where(Episode.uid == uid)).all()
        assert len(eps) == 1
        ep = eps[0]
        assert (ep.state, ep.sync_rev, ep.station_id, ep.run_code) == (
            "running",
            2,
            setup.ids["cell-a"],
            work["run_code"],
        )
        # the station's wall clock, mapped to the server's
        assert ep.started_at == datetime(2031, 5, 4, 9, 0, 12, 500000, tzinfo=UTC)
        events = s.scalars(
            sa.select(EpisodeEvent).where(EpisodeEvent.episode_id == ep.id).order_by("id")
        ).all()
        assert [(e.station_seq, e.kind) for e in events] == [(0, "armed"), (1, "started")]
        assert events[1].at == datetime(2031, 5, 4, 9, 0, 12, 500000, tzinfo=UTC)


def _token_ids(web: Web, setup: Setup, station: str) -> list[int]:
    """Two live tokens of ``station`` (a rotation's window): its calls then
    take no row lock on one token row, and may run at once on PostgreSQL."""
    with web.db() as s:
        second = station_credentials.rotate(
            s, name=station, actor=Actor(label="test-admin"), now=web.clock()
        ).token
        ids = []
        for token in (setup.tokens[station], second):
            live = station_credentials.live_token(s, token, now=web.clock())
            assert live is not None
            ids.append(live.id)
        return ids


def _race(web: Web, station_id: int, tokens: list[int], wire: EpisodeWire) -> list[Any]:
    """``wire`` synced by two sessions, as the route runs it (``record_use``
    first): the first's transaction is held open while the second runs."""
    settings = web.settings.scheduler
    factory = web.app.state.web.session_factory
    first, second = factory(), factory()
    outcome: dict[str, Any] = {}

    def racer() -> None:
        try:
            station_credentials.record_use(second, tokens[1], now=web.clock())
            outcome["answer"] = sync_episode(second, station_id, wire, settings)
            second.commit()
        except Exception as exc:  # said in the assertion below, not lost in the thread
            outcome["error"] = repr(exc)
        finally:
            second.rollback()
            second.close()

    try:
        station_credentials.record_use(first, tokens[0], now=web.clock())
        answered = sync_episode(first, station_id, wire, settings)
        t = threading.Thread(target=racer)
        t.start()
        time.sleep(0.3)  # let it reach its insert, which waits on the first's
        first.commit()
        t.join(60)
        assert not t.is_alive()
    finally:
        first.close()
    return [answered, outcome.get("answer", outcome)]


def test_two_first_snapshots_at_once_store_one_episode(web: Web, setup: Setup) -> None:
    """The same new uid sent twice at once (a retry while the first is still
    being answered): the one whose insert loses is answered as a replay, not
    500, and one episode with its events once is stored. On SQLite the second
    call waits at its first write (``record_use``), so the race is PostgreSQL's;
    both backends must answer the same."""
    work = claim(web, setup, "cell-a", "claim:1")["work"]
    tokens = _token_ids(web, setup, "cell-a")
    for n in range(3):
        body = episode_body(work, f"uidRACE{n:02d}", 1, events=[event(0, "armed"), event(1)])
        wire = EpisodeWire.model_validate(body)
        first, second = _race(web, setup.ids["cell-a"], tokens, wire)
        assert second == first
        assert (first.rev, first.state, first.settled) == (1, "armed", False)
        with web.db() as s:
            eps = s.scalars(sa.select(Episode).where(Episode.uid == wire.uid)).all()
            assert len(eps) == 1
            seqs = s.scalars(
                sa.select(EpisodeEvent.station_seq).where(EpisodeEvent.episode_id == eps[0].id)
            ).all()
            assert sorted(seqs) == [0, 1]
    # a closed first snapshot settles the run once; the loser is told it is settled
    log = {"placed": 0, "lost": 0, "dropped": 0, "outcome": "ran_out_of_time"}
    body = episode_body(work, "uidRACEZZ", 1, state="closed", events=[event(0)], **log)
    first, second = _race(web, setup.ids["cell-a"], tokens, EpisodeWire.model_validate(body))
    assert second == first and first.settled is True
    assert assignment(web, work["run_code"])[0] == AssignmentStatus.done


def test_two_first_puts_at_once_over_http_are_both_answered(web: Web, setup: Setup) -> None:
    """The same through the routes: two clients (the station's two live
    tokens) PUT each new uid at once, released together by a barrier; every
    answer is 200 and the two agree. Timing decides whether the inserts meet,
    so the service test above is the one that forces the race."""
    work = claim(web, setup, "cell-a", "claim:1")["work"]
    with web.db() as s:
        second = station_credentials.rotate(
            s, name="cell-a", actor=Actor(label="test-admin"), now=web.clock()
        ).token
    clients = [(web.client(), setup.tokens["cell-a"]), (web.client(), second)]
    for n in range(8):
        body = episode_body(work, f"uidHTTP{n:02d}", 1, events=[event(0, "armed")])
        barrier = threading.Barrier(2)
        answers: list[Any] = [None, None]

        def send(
            i: int, body: dict[str, Any] = body, barrier: Any = barrier, answers: Any = answers
        ) -> None:
            client, token = clients[i]
            barrier.wait(10)
            try:
                r = client.put(f"{API}/episodes/{body['uid']}", json=body, headers=bearer(token))
                answers[i] = (r.status_code, r.json())
            except Exception as exc:  # the test client raises a 500's error: said below
                answers[i] = repr(exc)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert answers[0] == answers[1] and answers[0][0] == 200, answers
    with web.db() as s:
        uids = s.scalars(sa.select(Episode.uid).where(Episode.uid.like("uidHTTP%"))).all()
        assert sorted(uids) == [f"uidHTTP{n:02d}" for n in range(8)]
        events = s.scalar(sa.select(sa.func.count()).select_from(EpisodeEvent))
        assert events == 8


def test_a_closed_episode_settles_its_run_once(web: Web, setup: Setup) -> None:
    work = claim(web, setup, "cell-a", "claim:1")["work"]
    code, items = work["run_code"], work["items"]
    uid = "uidDONE01"
    log = {"placed": items - 1, "lost": 1, "dropped": 0, "outcome": "ran_out_of_time"}
    closed = episode_body(work, uid, 3, state="closed", events=[event(0)], **log)
    r = put(web, setup, "cell-a", closed)
    assert r.status_code == 200, r.text
    assert r.json()["settled"] is True
    status, _, completed_at = assignment(web, code)
    assert status == AssignmentStatus.done
    with web.db() as s:
        slots = s.scalar(sa.select(sa.func.count()).select_from(Assignment))
    web.clock.advance(seconds=5)
    # the replay, and a newer revision that only adds an event: settled already
    assert put(web, setup, "cell-a", closed).json()["settled"] is True
    newer = {**closed, "rev": 4, "events": [event(0), event(1)]}
    assert put(web, setup, "cell-a", newer).json() == {
        "uid": uid,
        "rev": 4,
        "state": "closed",
        "settled": True,
    }
    assert assignment(web, code) == (status, setup.ids["cell-a"], completed_at)
    with web.db() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Assignment)) == slots
        ep = s.scalars(sa.select(Episode).where(Episode.uid == uid)).one()
        assert (ep.placed, ep.outcome, ep.assignment_id is not None) == (
            items - 1,
            "ran_out_of_time",
            True,
        )
    # a closed episode's log is corrected through the review log, not a re-sync
    changed = {**newer, "rev": 5, "placed": items - 2, "lost": 2}
    refused = put(web, setup, "cell-a", changed)
    assert refused.status_code == 409 and fields_of(refused) == ["placed"]


def test_an_interrupted_episode_requeues_its_run(web: Web, setup: Setup) -> None:
    work = claim(web, setup, "cell-a", "claim:1")["work"]
    body = episode_body(work, "uidINTR01", 2, state="interrupted", outcome_reason="daemon died")
    r = put(web, setup, "cell-a", body)
    assert r.status_code == 200 and r.json()["settled"] is True
    assert assignment(web, work["run_code"])[0] == AssignmentStatus.requeued
    with web.db() as s:
        ep = s.scalars(sa.select(Episode).where(Episode.uid == "uidINTR01")).one()
        assert ep.outcome == "system"
        replacements = s.scalar(
            sa.select(sa.func.count()).where(Assignment.replaces_id.is_not(None))
        )
    assert put(web, setup, "cell-a", {**body, "rev": 3}).json()["settled"] is True
    with web.db() as s:
        assert (
            s.scalar(sa.select(sa.func.count()).where(Assignment.replaces_id.is_not(None)))
            == replacements
            == 1
        )


def _rows(web: Web) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the schedule and the episodes are made of, in full."""
    out = {}
    with web.db() as s:
        for model in (Assignment, Episode, EpisodeEvent, StationRequest, AuditLog):
            table = model.__table__
            rows = s.execute(sa.select(table).order_by(*table.primary_key.columns)).all()
            out[table.name] = [tuple(r) for r in rows]
    return out


def _claim_answer(web: Web, setup: Setup, station: str, key: str) -> Any:
    return web.client().post(
        f"{API}/claims",
        json={"campaign": setup.campaign_id},
        headers=keyed(setup.tokens[station], key),
    )


@pytest.mark.parametrize("state", ["armed", "running", "finishing", "awaiting_log"])
def test_a_second_claim_while_an_episode_is_live_is_refused_and_settles_nothing(
    web: Web, setup: Setup, state: str
) -> None:
    work = claim(web, setup, "cell-a", "claim:1")["work"]
    code = work["run_code"]
    assert put(web, setup, "cell-a", episode_body(work, "uidLIVE01", 1, state=state)).is_success
    web.clock.advance(seconds=LEASE_S - 1)
    before = _rows(web)
    # a second daemon on the same token (or its holder) asks again, with a new key
    r = _claim_answer(web, setup, "cell-a", "claim:2")
    assert r.status_code == 409, r.text
    assert fields_of(r) == ["campaign"]
    said = r.json()["detail"][0]["msg"]
    assert code in said and f"uidLIVE01 {state}" in said
    assert _rows(web) == before  # nothing settled, nothing handed out, no answer kept
    assert assignment(web, code)[:2] == (AssignmentStatus.claimed, setup.ids["cell-a"])
    # the station's own episode ends as it would have: the run counts once, its own
    log = {"placed": work["items"], "lost": 0, "dropped": 0, "outcome": "success"}
    closed = episode_body(work, "uidLIVE01", 2, state="closed", events=[event(0)], **log)
    assert put(web, setup, "cell-a", closed).json()["settled"] is True
    assert assignment(web, code)[0] == AssignmentStatus.done
    with web.db() as s:
        assert s.scalar(sa.select(sa.func.count()).where(Assignment.replaces_id.is_not(None))) == 0
    # and the next claim, with the key refused before, is answered afresh
    assert claim(web, setup, "cell-a", "claim:2")["work"]["run_code"] != code


def test_abandoning_a_run_whose_episode_is_live_is_refused_too(web: Web, setup: Setup) -> None:
    work = claim(web, setup, "cell-a", "claim:1")["work"]
    code = work["run_code"]
    assert put(web, setup, "cell-a", episode_body(work, "uidABAN01", 1, state="running")).is_success
    before = _rows(web)
    r = web.client().post(
        f"{API}/claims/{code}/abandon",
        json={"reason": "pre-flight failed"},
        headers=keyed(setup.tokens["cell-a"], "abandon:1"),
    )
    assert r.status_code == 409 and fields_of(r) == ["run_code"] and code in r.text, r.text
    assert _rows(web) == before


def test_an_episode_silent_past_the_lease_is_presumed_dead_and_never_counts(
    web: Web, setup: Setup
) -> None:
    from proctor.analysis.store import load_episodes
    from proctor.core.domain import LabelStream

    work = claim(web, setup, "cell-a", "claim:1")["work"]
    code = work["run_code"]
    running = episode_body(work, "uidLOST01", 1, state="running")
    assert put(web, setup, "cell-a", running).is_success
    # a later snapshot keeps it alive: the lease counts from the last sync
    web.clock.advance(seconds=LEASE_S - 1)
    assert put(web, setup, "cell-a", {**running, "rev": 2, "events": [event(0)]}).is_success
    web.clock.advance(seconds=LEASE_S - 1)
    assert _claim_answer(web, setup, "cell-a", "claim:2").status_code == 409
    # silent for the lease (a host that lost its ledger): settled, and the next run given
    web.clock.advance(seconds=2)
    nxt = claim(web, setup, "cell-a", "claim:3")["work"]
    assert nxt["run_code"] != code
    assert assignment(web, code)[0] == AssignmentStatus.requeued
    # the episode was in fact still running: its later revisions are kept, labelled
    # by their requeued run, and never scored (the slot's replacement counts instead)
    log = {"placed": work["items"], "lost": 0, "dropped": 0, "outcome": "success"}
    closed = episode_body(work, "uidLOST01", 3, state="closed", events=[event(0)], **log)
    r = put(web, setup, "cell-a", closed)
    assert r.status_code == 200 and r.json()["settled"] is True
    assert assignment(web, code)[0] == AssignmentStatus.requeued
    with web.db() as s:
        ep = s.scalars(sa.select(Episode).where(Episode.uid == "uidLOST01")).one()
        assert (ep.state, ep.outcome) == ("closed", "success")
        table = load_episodes(s, campaign_id=setup.campaign_id, stream=LabelStream.detector_only)
    assert "uidLOST01" not in {e.episode_id for e in table.episodes}
    reasons = {x.episode_id: x.reason for x in table.excluded}
    assert reasons["uidLOST01"] == (
        f"its run {code} was requeued, not done: the slot's replacement counts instead"
    )


def test_a_hello_keeps_the_daemons_running_episode_live_past_the_lease(
    web: Web, setup: Setup
) -> None:
    work = claim(web, setup, "cell-a", "claim:1")["work"]
    code = work["run_code"]
    assert put(web, setup, "cell-a", episode_body(work, "uidLONG01", 1, state="running")).is_success
    other = claim(web, setup, "cell-b", "claim:1")["work"]
    assert put(
        web, setup, "cell-b", episode_body(other, "uidLONG02", 1, state="running")
    ).is_success

    def hello(station: str, live: list[str]) -> None:
        r = web.client().post(
            f"{API}/hello",
            json=hello_body(station, live=live),
            headers=bearer(setup.tokens[station]),
        )
        assert r.status_code == 200, r.text

    # a long episode with no new snapshot: the daemon's heartbeats keep it live
    for _ in range(4):
        web.clock.advance(seconds=LEASE_S / 2)
        # cell-b names cell-a's episode too: only a station's own are kept live
        hello("cell-a", ["uidLONG01"])
        hello("cell-b", ["uidLONG01"])
    assert _claim_answer(web, setup, "cell-a", "claim:2").status_code == 409
    # cell-b's own episode went quiet two leases ago: presumed dead, its run settled
    assert claim(web, setup, "cell-b", "claim:2")["work"]["run_code"] != other["run_code"]
    assert assignment(web, other["run_code"])[0] == AssignmentStatus.requeued
    # a daemon that no longer names it (it lost track): dead one lease later
    web.clock.advance(seconds=LEASE_S / 2)
    hello("cell-a", [])
    assert _claim_answer(web, setup, "cell-a", "claim:3").status_code == 409
    web.clock.advance(seconds=LEASE_S / 2)
    hello("cell-a", [])
    assert claim(web, setup, "cell-a", "claim:4")["work"]["run_code"] != code
    assert assignment(web, code)[0] == AssignmentStatus.requeued
    bad = web.client().post(
        f"{API}/hello",
        json=hello_body("cell-a", live=["no spaces"]),
        headers=bearer(setup.tokens["cell-a"]),
    )
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "live", 0]


class _Station:
    """A station host over the station API that claims again while its own
    episode is live, several times an episode; every third run it goes silent
    past the lease mid-episode, so the second claim goes through and the
    episode it abandoned still ends with a counting outcome (the N3 repro)."""

    def __init__(self, web: Web, setup: Setup, name: str) -> None:
        self.web, self.setup, self.name = web, setup, name
        self.keys = 0
        self.refused = self.doubled = 0

    def claim(self) -> Any:
        self.keys += 1
        r = _claim_answer(self.web, self.setup, self.name, f"claim:{self.keys}")
        assert r.status_code == 200, r.text
        return r.json()["work"]

    def second_claim_refused(self, work: dict[str, Any]) -> None:
        self.keys += 1
        r = _claim_answer(self.web, self.setup, self.name, f"claim:{self.keys}")
        assert r.status_code == 409 and work["run_code"] in r.text, r.text
        self.refused += 1

    def sync(self, work: dict[str, Any], uid: str, rev: int, state: str, **kw: Any) -> None:
        r = put(self.web, self.setup, self.name, episode_body(work, uid, rev, state=state, **kw))
        assert r.status_code == 200, r.text

    def close(self, work: dict[str, Any], uid: str, rev: int, outcome: str) -> None:
        log = {"placed": 0, "lost": 0, "dropped": 0} if outcome != "system" else {}
        times = {"clock_start_s": 1000.0, "clock_end_s": 1060.0, "events": [event(0)]}
        self.sync(work, uid, rev, "closed", outcome=outcome, **log, **times)

    def run(self, work: dict[str, Any], n: int) -> None:
        uid = f"uid{self.name[-1]}{n:04d}"
        self.sync(work, uid, 1, "armed")
        self.second_claim_refused(work)
        self.sync(work, uid, 2, "running")
        self.second_claim_refused(work)
        if n % 3 == 0:
            # silent past the lease: presumed dead, so the claim settles the run
            self.web.clock.advance(seconds=LEASE_S + 1)
            self.claim()  # held from now on, handed back by the next claim
            self.doubled += 1
            self.close(work, uid, 3, "ran_out_of_time")  # it was running all along
            return
        if n % 7 == 0:
            self.close(work, uid, 3, "system")  # a station fault: requeued, as ever
            return
        self.sync(work, uid, 3, "awaiting_log")
        self.second_claim_refused(work)
        self.close(work, uid, 4, "ran_out_of_time")


def test_one_slot_one_counted_episode_under_second_claims(web: Web, setup: Setup) -> None:
    from collections import Counter

    from proctor.analysis.store import load_episodes
    from proctor.core.domain import LabelStatus, LabelStream, Outcome

    stations = [_Station(web, setup, name) for name in ("cell-a", "cell-b")]
    runs, idle = 0, 0
    while idle < len(stations):
        assert runs < 200, "the campaign never ran out of work"
        st = stations[runs % len(stations)] if idle == 0 else stations[idle % len(stations)]
        work = st.claim()
        if work is None:
            idle += 1
            continue
        idle = 0
        runs += 1
        st.run(work, runs)
        web.clock.advance(seconds=1)

    with web.db() as s:
        cid = setup.campaign_id
        assert (
            s.scalar(
                sa.select(sa.func.count()).where(
                    Assignment.campaign_id == cid,
                    Assignment.status.in_((AssignmentStatus.pending, AssignmentStatus.claimed)),
                )
            )
            == 0
        )
        originals = sa.and_(Assignment.campaign_id == cid, Assignment.replaces_id.is_(None))
        total = s.scalar(sa.select(sa.func.count()).where(originals))
        done = s.scalar(
            sa.select(sa.func.count()).where(
                Assignment.campaign_id == cid, Assignment.status == AssignmentStatus.done
            )
        )
        # the allocation: original slots per (policy, object) cell
        allocation = Counter(
            s.execute(sa.select(Assignment.policy_id, Assignment.object_type_id).where(originals))
        )
        closed = s.scalars(sa.select(Episode).where(Episode.campaign_id == cid)).all()
        counting = [e for e in closed if e.outcome not in (None, Outcome.system)]
        for e in closed:
            e.label_status = LabelStatus.auto  # no placements to annotate: the counts are 0
        s.flush()
        table = load_episodes(s, campaign_id=cid, stream=LabelStream.auto_and_reviewed)
        names = {p.id: p.name for p in [*setup.world.policies, setup.world.reference]}
        objects = {o.id: o.name for o in setup.world.objects}
        excluded = {x.episode_id: x.reason for x in table.excluded}

    doubled = sum(st.doubled for st in stations)
    assert doubled >= 3 and sum(st.refused for st in stations) >= 3 * runs - 2 * doubled
    # episodes that ran to a counting end: one per slot, plus those abandoned by a claim
    assert len(counting) == total + doubled
    scored = Counter((e.policy, e.object) for e in table.episodes if e.outcome != "system")
    assert scored == Counter(
        {(names[pid], objects[oid]): n for (pid, oid), n in allocation.items()}
    )
    assert set(allocation.values()) == {4}  # builders.protocol's episodes per cell
    assert done == total == sum(scored.values())
    assert sum("was requeued, not done" in why for why in excluded.values()) == doubled


def test_bad_episodes_are_refused_by_field_and_write_nothing(web: Web, setup: Setup) -> None:
    work = claim(web, setup, "cell-a", "claim:1")["work"]
    items = work["items"]
    web.add_user("op", Role.operator)
    with web.db() as s:
        from proctor.core.db.models import User

        op_id = s.scalar(sa.select(User.id).where(User.username == "op"))
    good = {
        "placed": items,
        "lost": 0,
        "dropped": 0,
        "outcome": "success",
        "operator_label": "cell-a:olga",
    }
    cases = [
        ({"placed": items, "lost": 1}, "placed + lost + dropped"),
        ({"outcome": "great"}, "outcome"),
        ({"object": "anvils"}, "object"),
        # a station cannot know the server's user ids: even a real one is refused
        ({"operator_id": 987654}, "operator_id"),
        ({"operator_id": op_id}, "operator_id"),
        ({"operator_label": "x" * 129}, "operator_label"),
        ({"operator_label": ""}, "operator_label"),
        ({"placed": items - 1}, "outcome"),  # success means every item handled
        ({"dropped": None}, "dropped"),
        ({"started_at": "2031-05-04T09:00:00"}, "started_at"),
        ({"tote_side": "right" if work["tote_side"] == "left" else "left"}, "tote_side"),
        ({"rev": 0}, "rev"),
        # what PostgreSQL cannot store is refused by name, never a 500
        ({"operator_notes": "a\x00b"}, "operator_notes"),
        ({"events": [{**event(0), "details": {"k": "\x00"}}]}, "events[0].details.k"),
        ({"sim_seed": 2**40}, "sim_seed"),
        ({"events": [event(2**40)]}, "events[0].seq"),
        ({"clock_offset_s": 60, "ended_at": "9999-12-31T23:59:30Z"}, "ended_at"),
    ]
    for change, field in cases:
        body = episode_body(work, "uidBAD001", 1, state="closed", events=[event(0)], **good)
        body.update(change)
        r = put(web, setup, "cell-a", body)
        assert r.status_code == 422, (change, r.text)
        assert field in fields_of(r), (change, r.json())
    mismatch = put(web, setup, "cell-a", episode_body(work, "uidBAD001", 1), uid="uidOTHER1")
    assert mismatch.status_code == 422 and fields_of(mismatch) == ["uid"]
    with web.db() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Episode)) == 0
        assert s.scalar(sa.select(sa.func.count()).select_from(EpisodeEvent)) == 0
    assert assignment(web, work["run_code"])[0] == AssignmentStatus.claimed
    ok = put(web, setup, "cell-a", episode_body(work, "uidBAD001", 1, state="closed", **good))
    assert ok.status_code == 200 and ok.json()["settled"] is True


def test_the_operator_arrives_as_a_label_kept_in_the_log_event_and_shown_to_staff(
    web: Web, setup: Setup
) -> None:
    work = claim(web, setup, "cell-a", "claim:1")["work"]
    items = work["items"]
    logged = {"placed": items, "lost": 0, "dropped": 0, "outcome": "success"}
    # the station's own event details say something else: the wire's field wins
    log_event = {**event(1, "operator_log"), "details": {"operator_label": "forged"}}
    body = episode_body(
        work,
        "uidLABEL01",
        1,
        state="closed",
        events=[event(0), log_event],
        operator_label="cell-a:alice",
        **logged,
    )
    r = put(web, setup, "cell-a", body)
    assert r.status_code == 200, r.text
    with web.db() as s:
        ep = s.scalars(sa.select(Episode).where(Episode.uid == "uidLABEL01")).one()
        assert ep.operator_id is None
        details = s.scalars(
            sa.select(EpisodeEvent.details).where(
                EpisodeEvent.episode_id == ep.id, EpisodeEvent.kind == "operator_log"
            )
        ).one()
    assert details["operator_label"] == "cell-a:alice"
    web.add_user("ada", Role.admin)
    admin = web.client()
    assert login(admin, "ada").status_code == 303
    shown = admin.get("/api/episodes/uidLABEL01")
    assert shown.status_code == 200, shown.text
    assert shown.json()["logged_by"] == "cell-a:alice"
    page = admin.get("/episodes/uidLABEL01")
    assert page.status_code == 200 and 'id="logged-by">cell-a:alice<' in page.text
    # the public sees no operator at all
    assert web.client("10.0.0.9").get("/api/episodes/uidLABEL01").json().get("logged_by") is None


def test_a_station_syncs_only_its_own_runs_and_episodes(web: Web, setup: Setup) -> None:
    mine = claim(web, setup, "cell-a", "claim:1")["work"]
    theirs = claim(web, setup, "cell-b", "claim:1")["work"]
    assert mine["run_code"] != theirs["run_code"]
    r = put(web, setup, "cell-b", episode_body(mine, "uidSTEAL1", 1))
    assert r.status_code == 403 and fields_of(r) == ["run_code"]
    made_up = put(web, setup, "cell-b", {**episode_body(mine, "uidSTEAL1", 1), "run_code": "ZZZZ"})
    assert made_up.status_code == 403 and fields_of(made_up) == ["run_code"]
    assert put(web, setup, "cell-a", episode_body(mine, "uidMINE01", 1)).status_code == 200
    stolen = put(web, setup, "cell-b", episode_body(theirs, "uidMINE01", 2))
    assert stolen.status_code == 403 and fields_of(stolen) == ["uid"]
    with web.db() as s:
        ep = s.scalars(sa.select(Episode).where(Episode.uid == "uidMINE01")).one()
        assert (ep.sync_rev, ep.run_code) == (1, mine["run_code"])


# -- the lease -------------------------------------------------------------------------


def test_a_revoked_stations_claim_is_released_after_the_lease(web: Web, setup: Setup) -> None:
    held = claim(web, setup, "cell-a", "claim:1")["work"]["run_code"]
    live = claim(web, setup, "cell-b", "claim:1")["work"]["run_code"]
    with web.db() as s:
        station_credentials.revoke(s, name="cell-a", actor=Actor(label="test-admin"))
    # silent for less than the lease: still held
    web.clock.advance(seconds=LEASE_S - 1)
    r = web.client().post(
        f"{API}/hello", json=hello_body("cell-b"), headers=bearer(setup.tokens["cell-b"])
    )
    assert r.status_code == 200
    assert assignment(web, held)[:2] == (AssignmentStatus.claimed, setup.ids["cell-a"])
    # past it: the next hello hands it back; cell-b (live token, silent too) keeps its own
    web.clock.advance(seconds=2 * LEASE_S)
    r = web.client().post(
        f"{API}/hello", json=hello_body("cell-b"), headers=bearer(setup.tokens["cell-b"])
    )
    assert r.status_code == 200
    assert assignment(web, held)[:2] == (AssignmentStatus.pending, None)
    assert assignment(web, live)[:2] == (AssignmentStatus.claimed, setup.ids["cell-b"])
    with web.db() as s:
        audit = s.scalars(
            sa.select(AuditLog).where(AuditLog.actor_label == "scheduler:lease")
        ).all()
        assert [(a.action, a.details["station"], a.details["released"]) for a in audit] == [
            ("campaign.free_station", "cell-a", 1)
        ]
        # a second pass finds nothing more to release
        later = web.clock() + timedelta(hours=1)
        assert release_lapsed_claims(s, later, LEASE_S) == []


def test_the_sweep_releases_a_lapsed_claim_with_no_station_calling(
    web: Web, setup: Setup, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No station calls after the revocation: the app's sweep hands the run
    back. Its first pass fails (the database away for a moment): logged, and
    the thread goes on to the next."""
    held = claim(web, setup, "cell-a", "claim:1")["work"]["run_code"]
    with web.db() as s:
        station_credentials.revoke(s, name="cell-a", actor=Actor(label="test-admin"))
    web.clock.advance(seconds=2 * LEASE_S)
    calls: list[datetime] = []

    def flaky(session: Any, now: datetime, lease_s: float) -> list[str]:
        calls.append(now)
        if len(calls) == 1:
            raise sa.exc.OperationalError("SELECT 1", {}, Exception("the database is away"))
        return release_lapsed_claims(session, now, lease_s)

    monkeypatch.setattr(station_sweeps, "release_lapsed_claims", flaky)
    sweep = web.app.state.web.station_sweep
    with TestClient(web.app):  # start-up and shut-down, as a server runs them
        deadline = time.monotonic() + 20
        while assignment(web, held)[0] != AssignmentStatus.pending:
            assert time.monotonic() < deadline, calls
            time.sleep(0.1)
    assert sweep._thread is None  # stopped at shut-down
    assert len(calls) >= 2 and sweep.passes >= 1
    assert assignment(web, held)[:2] == (AssignmentStatus.pending, None)
    assert "station sweep: a pass failed" in caplog.text
    # no two passes at once: one asked for while another runs does nothing
    with sweep._running:
        assert sweep.run_once() is None
    assert sweep.run_once() == station_sweeps.SweepPass(released=[], aborted=[])


def test_the_sweep_period_is_a_second_or_more_or_off(tmp_path: Path) -> None:
    for bad in (-1, 0.5):
        with pytest.raises(ConfigError, match="station_sweep_s"):
            load_settings(env="test", data_dir=tmp_path, scheduler={"station_sweep_s": bad})
    off = load_settings(env="test", data_dir=tmp_path, scheduler={"station_sweep_s": 0})
    assert off.scheduler.station_sweep_s == 0


def test_a_key_raced_by_two_calls_acts_once(web: Web, setup: Setup) -> None:
    """Two calls under one key at once (a retry sent while the first is still
    being answered): the second to store the key is refused and rolled back,
    and a retry after that gets the first answer."""
    factory = web.app.state.web.session_factory
    station_id, now = setup.ids["cell-a"], web.clock()

    def answer(n: int) -> HelloReply:
        return HelloReply(station_id=n, server_time=now, heartbeat_s=1.0, lease_s=5.0)

    first, second = factory(), factory()
    reached = threading.Event()
    outcome: dict[str, Any] = {}

    def racer() -> None:
        def act() -> HelloReply:
            reached.set()
            return answer(2)

        try:
            outcome["answer"] = once(
                second, station_id=station_id, key="k", route="POST /x", now=now, act=act
            )
        except FieldConflict as exc:
            outcome["refused"] = exc.field
        except Exception as exc:  # said in the assertion below, not lost in the thread
            outcome["error"] = repr(exc)
        finally:
            second.rollback()
            second.close()

    try:
        stored = once(
            first, station_id=station_id, key="k", route="POST /x", now=now, act=lambda: answer(1)
        )
        t = threading.Thread(target=racer)
        t.start()
        assert reached.wait(30), outcome
        time.sleep(0.3)  # let it reach its insert, which waits on the first's
        first.commit()
        t.join(60)
        assert not t.is_alive()
    finally:
        first.close()
    assert outcome == {"refused": "Idempotency-Key"}

    def must_not_act() -> HelloReply:
        raise AssertionError("a stored key acted again")

    with web.db() as s:
        again = once(s, station_id=station_id, key="k", route="POST /x", now=now, act=must_not_act)
        assert again == stored and stored["station_id"] == 1
        assert s.scalar(sa.select(sa.func.count()).select_from(StationRequest)) == 1


def test_the_human_references_runs_point_at_the_station_hosts_teleop(
    web: Web, setup: Setup
) -> None:
    from proctor.core.domain import SubmissionKind

    teleop = "ws://127.0.0.1:8765"
    with web.db() as s:
        sub = s.merge(setup.world.submissions[setup.world.reference.name])
        sub.kind, sub.endpoint_url = SubmissionKind.teleop, teleop
    seen = []
    for n in range(40):
        work = claim(web, setup, "cell-a", f"claim:{n}")["work"]
        if work is None:
            break
        seen.append((work["gateway_path"], work["teleop_url"]))
        r = web.client().post(
            f"{API}/claims/{work['run_code']}/abandon",
            json={"reason": "next"},
            headers=keyed(setup.tokens["cell-a"], f"abandon:{n}"),
        )
        assert r.status_code == 200
    refs = [x for x in seen if x[1] is not None]
    assert refs and all(x == (None, teleop) for x in refs)
    others = [x for x in seen if x[1] is None]
    assert others and all(x[0].startswith("/policy/") for x in others)
