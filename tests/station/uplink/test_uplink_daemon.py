"""A station host on the station API only: the daemon built by
``open_remote_station`` runs a simulated episode claimed from the (fake)
server, keeps it in its ledger while the server is away, and the forwarder
delivers it, closed, with its artifacts; no database URL is read.

The server here is the fake (tests/station/uplink/fake_station_server.py), a
stand-in for the contract; the end-to-end tests use the real one."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from proctor.core.db import session_scope
from proctor.core.db.models import EpisodeEvent
from proctor.core.domain import EndpointDialect
from proctor.policywire.wire.spec import ActionSpace
from proctor.station import episodes
from proctor.station.daemon import StationDaemon
from proctor.station.uplink.remote import StationFolder, open_remote_station
from tests.station.api_support import station_client
from tests.station.conftest import PROCTOR, ROOT, clean_env, sim_config
from tests.station.uplink.fake_station_server import FakeStationServer, parts_sender
from tests.station.uplink.uplink_support import (
    TOKEN,
    Ledger,
    until,
    work,
    work_wire,
)
from tests.station.uplink.uplink_support import fake as fake  # the fixture

# a PostgreSQL nobody listens on: any attempt to open it fails loudly
UNREACHABLE_DB = "postgresql+psycopg://nobody@127.0.0.1:1/never"


@pytest.fixture
def remote(
    fake: FakeStationServer, policy_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[StationDaemon]:
    monkeypatch.delenv("PROCTOR_DB_URL", raising=False)
    monkeypatch.setenv("PROCTOR_DATABASE_URL", UNREACHABLE_DB)
    policy = policy_server("reference")
    fake.state.runs = [
        work_wire("R-SIM1", gateway_path=None, teleop_url=policy.url, sim_seed=1),
    ]
    daemon = open_remote_station(
        sim_config(name="cell-remote", console_deadman_s=0),
        "sim",
        data_dir=tmp_path / "data",
        server=fake.url,
        token=TOKEN,
        campaign="spring",
        heartbeat_s=0.5,
        send_parts=parts_sender(),
    )
    daemon.open()
    try:
        yield daemon
    finally:
        daemon.close()


def _until_state(client: TestClient, state: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (status := client.get("/api/status").json())["state"] != state:
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
    return status


def test_a_claimed_sim_episode_reaches_the_server_closed_with_its_artifacts(
    remote: StationDaemon, fake: FakeStationServer, tmp_path: Path
) -> None:
    with station_client(remote) as client:
        until(lambda: client.get("/api/status").json()["uplink"]["online"], what="online")
        armed = client.post("/api/next")
        assert armed.status_code == 200, armed.text
        assert armed.json()["work"]["run_code"] == "R-SIM1"
        client.post("/api/start")
        _until_state(client, "awaiting_log")
        assert remote.uplink is not None and remote.uplink.drain(60)  # type: ignore[attr-defined]
        uid = client.get("/api/status").json()["last_episode"]["episode"]
        assert fake.state.episodes[uid].state == "awaiting_log"

        fake.stop()  # the server goes away: the operator's log is kept in the ledger
        until(lambda: not client.get("/api/status").json()["uplink"]["online"], what="offline")
        logged = client.post(
            "/api/log",
            json={
                "placed": 2,
                "lost": 0,
                "dropped": 0,
                "outcome": "success",
                # as the console sends them: its own account's id and name
                "operator_id": 9,
                "operator_name": "alice",
            },
        )
        assert logged.status_code == 200, logged.text
        uplink = until(
            lambda: (u := client.get("/api/status").json()["uplink"])["waiting"] == 1 and u,
            what="one episode waiting",
        )
        assert uplink["online"] is False
        homed = client.post("/api/home", json={"cell_clear": True})
        assert homed.status_code == 200, homed.text
        nothing = client.post("/api/next")  # offline: no claim, and the console says why
        assert nothing.status_code == 404, nothing.text
        assert "offline" in nothing.json()["detail"]

        fake.start()
        assert remote.uplink.drain(60), client.get("/api/status").json()["uplink"]  # type: ignore[attr-defined]
    closed = fake.state.episodes[uid]
    assert closed.state == "closed" and closed.outcome == "success" and closed.placed == 2
    # the console's id is the station host's own: the server gets the label only
    assert (closed.operator_id, closed.operator_label) == (None, "cell-remote:alice")
    assert closed.events[-1].details["operator_label"] == "cell-remote:alice"
    assert [e.kind for e in closed.events][:2] == ["armed", "policy_connected"]
    assert closed.events[-1].kind == "operator_log"
    kinds = {req.kind for (u, _), req in fake.state.artifacts.items() if u == uid}
    assert {"telemetry", "manifest", "video"} <= kinds
    assert fake.state.settled == ["R-SIM1"]
    assert fake.state.violations == []
    # the ledger is the station's own file, with no server row in it
    ledger = Ledger.open(StationFolder.of(tmp_path / "data", remote.config).root)
    with session_scope(ledger.sessions) as s:
        row = episodes.get_episode(s, uid)
        assert (row.campaign_id, row.assignment_id, row.operator_id) == (None, None, None)


# what would tell the arms apart on the station host: how a policy spoke
WIRE_WORDS = (
    *(d.value for d in EndpointDialect),
    *(a.value for a in ActionSpace),
    "image_size",
    "n_external_cameras",
    "needs_wrist_camera",
    "needs_session_id",
    "session",
)


def test_the_station_hosts_ledger_and_log_do_not_say_how_the_policy_spoke(
    remote: StationDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A shell on the robot's computer reads the ledger and the journal: neither
    may carry the dialect, action space, image size, camera count or session flag."""
    caplog.set_level(logging.DEBUG, logger="proctor")
    with station_client(remote) as client:
        until(lambda: client.get("/api/status").json()["uplink"]["online"], what="online")
        armed = client.post("/api/next")
        assert armed.status_code == 200, armed.text
        client.post("/api/start")
        _until_state(client, "awaiting_log")
        uid = client.get("/api/status").json()["last_episode"]["episode"]
    ledger = Ledger.open(StationFolder.of(tmp_path / "data", remote.config).root)
    with session_scope(ledger.sessions) as s:
        row = episodes.get_episode(s, uid)
        events = s.query(EpisodeEvent).filter_by(episode_id=row.id).all()
        written = [(e.kind, e.message, json.dumps(e.details or {})) for e in events]
    assert ("policy_connected", "policy answered", "{}") in written
    assert caplog.records  # the daemon did log the episode
    lines = [r.getMessage() for r in caplog.records]
    for word in WIRE_WORDS:
        assert not [w for w in written if word in " ".join(w)], (word, written)
        assert not [line for line in lines if word in line], (word, lines)


def test_the_daemon_status_carries_the_uplink(remote: StationDaemon) -> None:
    status = until(lambda: (s := remote.status())["uplink"]["online"] and s, what="online")
    assert set(status["uplink"]) >= {"online", "waiting", "uploading", "last_error"}
    assert status["uplink"]["waiting"] == 0


def test_an_episode_interrupted_before_a_restart_is_recovered_in_the_ledger_and_synced(
    fake: FakeStationServer, tmp_path: Path
) -> None:
    cfg = sim_config(name="cell-remote", console_deadman_s=0)
    ledger = Ledger.open(StationFolder.of(tmp_path / "data", cfg).root)
    with session_scope(ledger.sessions) as s:  # what a killed daemon left: an armed episode
        station = episodes.ensure_station(s, name=cfg.name, profile="sim")
        obj = episodes.ensure_object_type(s, name="towels")
        uid = episodes.create_episode(s, work=work("R-INT1"), station=station, object_type=obj).uid
    daemon = open_remote_station(
        cfg,
        "sim",
        data_dir=tmp_path / "data",
        server=fake.url,
        token=TOKEN,
        campaign="c",
        heartbeat_s=0.5,
        send_parts=parts_sender(),
    )
    try:
        assert [r.uid for r in daemon.recovered] == [uid]
        assert daemon.uplink.drain(30)  # type: ignore[union-attr]
        assert fake.state.episodes[uid].state == "interrupted"
        assert fake.state.episodes[uid].outcome == "system"
        assert fake.state.settled == ["R-INT1"]
    finally:
        daemon.close()


def test_proctor_station_run_with_a_server_opens_no_database(
    fake: FakeStationServer, processes: Any, tmp_path: Path
) -> None:
    config = tmp_path / "station.toml"
    config.write_text(
        'name = "cell-cli"\nconsole_deadman_s = 0\n'
        f'[uplink]\nserver = "{fake.url}"\ncampaign = "spring"\nheartbeat_s = 0.5\n'
    )
    env = clean_env(
        PROCTOR_STATION_TOKEN=TOKEN,
        PROCTOR_DATABASE_URL=UNREACHABLE_DB,
        PROCTOR_DATA_DIR=str(tmp_path / "data"),
        PYTHONPATH=str(ROOT),  # this checkout's proctor, whichever one is installed
    )
    proc = processes(
        [*PROCTOR, "station", "run", "--profile", "sim", "--config", str(config), "--port", "0"],
        env,
    )
    proc.wait_for(r"listening on http://127\.0\.0\.1:\d+", timeout=60)
    until(lambda: fake.state.hellos, what="a hello")
    assert fake.state.hellos[0].station == "cell-cli"
    assert (tmp_path / "data" / "station" / "cell-cli" / "ledger.db").is_file()
    assert "token" not in config.read_text()
