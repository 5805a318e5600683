"""The operator console on a station host, which holds no database URL.

The console is the web app on the host's own data folder (its embedded
SQLite, ``<data>/proctor.db``, beside the station's ledger in
``<data>/station/<name>/``), with ``PROCTOR_DATABASE_URL`` unset; its
operators are accounts made there with ``proctor user add``. The station
daemon beside it talks to the server only over the station API (the fake
server of tests/station/uplink/fake_station_server.py stands in for it; the real
server's half is tests/web/test_station_api.py). The operator's log reaches
the server as a label, ``<station>:<account>``, and no user id.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from proctor.core.settings import Settings, embedded_database_url, load_settings
from proctor.station.daemon import StationDaemon
from proctor.station.uplink.remote import open_remote_station
from proctor.web.app import create_app
from tests.station.conftest import PROCTOR, ROOT, clean_env, sim_config
from tests.station.uplink.fake_station_server import FakeStationServer, parts_sender
from tests.station.uplink.uplink_support import TOKEN, work_wire
from tests.station.uplink.uplink_support import fake as fake  # the fixture
from tests.web.conftest import PASSWORD, csrf_from, login, page_csrf
from tests.web.console_support import (
    bind_loopback,
    demo_policies,
    serving_station,
    sock_url,
    wait_for,
)

STATION = "cell-host"


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The station host's data folder, and an environment that names no
    database (nor any other server setting)."""
    for name in ("PROCTOR_DATABASE_URL", "PROCTOR_DB_URL", "PROCTOR_CONFIG", "PROCTOR_ARTIFACTS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "var-lib-proctor"


def _proctor(host: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROCTOR, *args],
        env=clean_env(PROCTOR_DATA_DIR=str(host), **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def station(host: Path, fake: FakeStationServer) -> Iterator[tuple[StationDaemon, str]]:
    """The station daemon on the station API only, its local API on loopback."""
    sock = bind_loopback()
    with demo_policies("reference") as (policy,):
        fake.state.runs = [
            work_wire("R-HOST1", gateway_path=None, teleop_url=policy.url, sim_seed=1)
        ]
        daemon = open_remote_station(
            sim_config(name=STATION, console_deadman_s=0),
            "sim",
            data_dir=host,
            server=fake.url,
            token=TOKEN,
            campaign="spring",
            heartbeat_s=0.5,
            send_parts=parts_sender(),
        )
        url = sock_url(sock)
        # the key file the console reads (its settings' default, in the host's data folder)
        with serving_station(daemon, sock, key_file=host / "station-api.key"):
            yield daemon, url


def _console_settings(host: Path, station_url: str) -> Settings:
    settings = load_settings(
        env="test",
        data_dir=host,
        secret_key="station-host-console-key-" + "y" * 32,
        # as deploy/station/console.toml serves it: the console alone
        web={"station_url": station_url, "surface": "station_console"},
    )
    # nothing named a database: the console's is the host's own file
    assert settings.db_url == embedded_database_url(host)
    return settings


def _status(client: TestClient) -> dict[str, Any]:
    r = client.get("/api/console/status")
    assert r.status_code == 200, r.text
    return r.json()


def test_an_operator_account_made_on_the_station_host_signs_in_without_a_database_url(
    host: Path, station: tuple[StationDaemon, str]
) -> None:
    made = _proctor(
        host, "user", "add", "alice", "--role", "operator", PROCTOR_USER_PASSWORD=PASSWORD
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert (host / "proctor.db").is_file()
    app = create_app(_console_settings(host, station[1]))
    try:
        with TestClient(app, follow_redirects=False) as client:
            assert client.get("/console").status_code in (302, 303, 401)
            assert login(client, "alice").status_code == 303
            assert client.get("/console").status_code == 200
            assert _status(client)["state"] == "idle"
    finally:
        app.state.web.engine.dispose()


def test_the_operators_log_reaches_the_server_as_the_station_and_account_label(
    host: Path, station: tuple[StationDaemon, str], fake: FakeStationServer
) -> None:
    daemon, station_url = station
    made = _proctor(
        host, "user", "add", "alice", "--role", "operator", PROCTOR_USER_PASSWORD=PASSWORD
    )
    assert made.returncode == 0, made.stdout + made.stderr
    app = create_app(_console_settings(host, station_url))
    try:
        with TestClient(app, follow_redirects=False) as client:
            assert login(client, "alice").status_code == 303
            csrf = {"x-csrf-token": page_csrf(client, "/console")}
            wait_for(lambda: daemon.status()["uplink"]["online"], 30, "the uplink")
            armed = client.post("/api/console/next", headers=csrf)
            assert armed.status_code == 200, armed.text
            started = client.post("/api/console/start", headers=csrf)
            assert started.status_code == 200, started.text
            wait_for(lambda: _status(client)["state"] == "awaiting_log", 90, "awaiting_log")
            log = {"placed": 2, "lost": 0, "dropped": 0, "outcome": "success", "notes": "ok"}
            saved = client.post("/api/console/log", json=log, headers=csrf)
            assert saved.status_code == 200, saved.text
    finally:
        app.state.web.engine.dispose()
    assert daemon.uplink is not None and daemon.uplink.drain(60)  # type: ignore[attr-defined]
    (episode,) = [e for e in fake.state.episodes.values() if e.run_code == "R-HOST1"]
    assert episode.state == "closed"
    assert (episode.operator_label, episode.operator_id) == (f"{STATION}:alice", None)
    assert episode.events[-1].kind == "operator_log"
    assert episode.events[-1].details["operator_label"] == f"{STATION}:alice"
    assert fake.state.violations == []


def test_the_deployed_console_unit_serves_and_signs_in_a_local_operator(host: Path) -> None:
    """``proctor serve --migrate`` as deploy/systemd/proctor-console.service
    runs it, with deploy/station/console.toml and the host's own key only
    (moved to this test's folder and port; plain HTTP here, where nginx
    terminates TLS on the host, so the cookie is not marked Secure)."""
    key = "station-host-console-key-" + "z" * 32
    made = _proctor(
        host,
        "user", "add", "alice", "--role", "operator",
        PROCTOR_CONFIG=str(ROOT / "deploy" / "station" / "console.toml"),
        PROCTOR_SECRET_KEY=key,
        PROCTOR_USER_PASSWORD=PASSWORD,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    port = _free_port()
    env = clean_env(
        PROCTOR_CONFIG=str(ROOT / "deploy" / "station" / "console.toml"),
        PROCTOR_SECRET_KEY=key,
        PROCTOR_DATA_DIR=str(host),
        PROCTOR_WEB__PORT=str(port),
        PROCTOR_WEB__SECURE_COOKIES="false",
    )
    proc = subprocess.Popen(
        [*PROCTOR, "serve", "--migrate"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, follow_redirects=False, timeout=10) as client:
            wait_for(lambda: _answers(client, proc), 60, "proctor serve")
            page = client.get("/login")
            signed_in = client.post(
                "/login",
                data={
                    "username": "alice",
                    "password": PASSWORD,
                    "next": "/console",
                    "csrf_token": csrf_from(page.text),
                },
            )
            assert signed_in.status_code == 303, signed_in.text
            assert client.get("/console").status_code == 200
            # the console alone: `/` leads to it, the server's pages and APIs are not here
            assert client.get("/").headers["location"] == "/console"
            for path in ("/leaderboard", "/submit", "/admin/users", "/api/me"):
                assert client.get(path).status_code == 404, path
            assert client.post("/api/station/v1/hello", json={}).status_code == 404
            # no station daemon listens here: the console says so, signed in
            status = client.get("/api/console/status")
            assert status.status_code == 200 and status.json()["state"] == "offline"
    finally:
        proc.terminate()
        output = proc.communicate(timeout=30)[0]
    assert (host / "proctor.db").is_file(), output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(client: httpx.Client, proc: subprocess.Popen[str]) -> bool:
    assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
    try:
        return client.get("/api/health").status_code == 200
    except httpx.TransportError:
        return False
