"""The daemon's local API answers the operator console alone (review finding
[N1]): a web page in a browser on the station host, a process without the
host's key, a DNS-rebound name or a text/plain body cannot arm a run, start
it, feed its deadman, log it or move the arm.

On a real simulated daemon: the review's repro (D1, D2) is refused and the
arm stays where it was; every route, HTTP and WebSocket, is walked from
``app.routes`` and refuses a request without the key; the key file is refused
when others could read it; and the Host check is tried over a real uvicorn
server on loopback, where Host and the bound port are what a browser sends.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn
from fastapi.routing import APIRoute, APIWebSocketRoute
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDenialResponse
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.errors import ConfigError
from proctor.core.settings import load_settings
from proctor.core.station_key import HEADER, ensure_station_key, read_station_key
from proctor.station.console_api import create_app
from proctor.station.daemon import StationDaemon
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind
from proctor.station.sim.world import HOME_Q
from tests.station.api_support import TEST_BASE, TEST_KEY, TEST_WS, station_app
from tests.station.conftest import PROCTOR, clean_env, sim_config

EVIL = {"origin": "http://evil.example", "content-type": "text/plain"}
FIELD = HEADER.lower()
# every action route of the API and a body a console would send it
ACTIONS: dict[str, Any] = {
    "/api/next": None,
    "/api/start": None,
    "/api/heartbeat": None,
    "/api/home": {"cell_clear": True, "open_gripper": True},
    "/api/stop": None,
    "/api/safety-stop": None,
    "/api/recover": None,
    "/api/gripper/activate": None,
    "/api/disarm": None,
    "/api/log": {"placed": 0, "lost": 0, "dropped": 0, "outcome": "success"},
}


@pytest.fixture
def daemon(station_db, policy_server, tmp_path: Path) -> Iterator[StationDaemon]:
    """A simulated station in real time with work to arm, the console deadman on."""
    _, sessions = station_db
    server = policy_server("reference")
    cfg = sim_config(
        name="cell-guard",
        sim={"clock": "monotonic"},
        work={
            "source": "adhoc",
            "options": {"policy": server.url, "object": "towels", "items": 2, "seed": 1},
        },
    )
    daemon = StationDaemon(
        cfg,
        "sim",
        sessions=sessions,
        store=LocalArtifactStore(tmp_path / "artifacts"),
        spool_root=tmp_path / "spool",
    )
    daemon.open()
    try:
        yield daemon
    finally:
        daemon.close()


@pytest.fixture
def bare(daemon: StationDaemon) -> Iterator[TestClient]:
    """A client of the daemon's own address that carries no key."""
    with TestClient(station_app(daemon), base_url=TEST_BASE) as client:
        yield client


def _away_from_home(daemon: StationDaemon) -> np.ndarray:
    """Drive the arm off its home pose (as a stopped episode leaves it) and
    return its joints once it has settled there."""
    arm = daemon.cell.arm
    target = np.asarray(HOME_Q) + np.array([0.3, 0.15, 0.0, -0.2, 0.0, 0.2, 0.0])
    arm.send(ArmCommand(ArmCommandKind.joint_position, target))
    deadline = time.monotonic() + 30
    while (
        np.max(np.abs((state := arm.read_state()).q - target)) > 2e-3
        or np.max(np.abs(state.dq)) > 1e-3
    ):
        assert time.monotonic() < deadline, "the arm never reached its displaced pose"
        time.sleep(0.05)
    assert not arm.at_home()
    return arm.read_state().q.copy()


# homing would move the first joint by 0.3 rad: a hundredth of a radian is "did not move"
def _joints(daemon: StationDaemon) -> np.ndarray:
    return daemon.cell.arm.read_state().q.copy()


# -- the review's repro: a web page on the station host --------------------------------------


def test_a_cross_site_page_cannot_arm_start_or_home(
    daemon: StationDaemon, bare: TestClient
) -> None:
    """D1/D2: text/plain POSTs with a foreign Origin and Host, as a page's
    "simple" request sends them, are refused; the state, the claim and the arm
    are untouched."""
    before = _away_from_home(daemon)
    state = daemon.status()["state"]
    assert state == "idle"
    rebound = {**EVIL, "host": "evil.example:8100"}
    answers = []
    # the attacker's order: home the arm (next needs it at home), arm, start, feed the deadman
    for path, body in (
        ("/api/home", '{"cell_clear":true}'),
        ("/api/next", None),
        ("/api/start", None),
        ("/api/heartbeat", None),
    ):
        for headers in (rebound, EVIL):  # rebound, and a page served from anywhere
            answers.append((path, bare.post(path, content=body, headers=headers)))
    # each answer came after its action had run (homing answers once the arm is home)
    status = daemon.status()
    assert status["state"] == "idle" and "episode" not in status, status
    assert status["at_home"] is False
    np.testing.assert_allclose(_joints(daemon), before, atol=0.01)
    for path, r in answers:
        assert r.status_code == 403, (path, r.text)
        assert r.json()["field"] in ("origin", "host"), r.text


def test_the_key_host_origin_and_body_are_each_required(
    daemon: StationDaemon, bare: TestClient
) -> None:
    before = _away_from_home(daemon)
    key = {HEADER: TEST_KEY}
    json_home = {"cell_clear": True, "open_gripper": True}

    missing = bare.post("/api/home", json=json_home)
    assert missing.status_code == 401 and missing.json()["field"] == FIELD, missing.text
    assert "missing" in missing.json()["detail"]
    wrong = bare.post("/api/home", json=json_home, headers={HEADER: TEST_KEY + "x"})
    assert wrong.status_code == 401 and wrong.json()["field"] == FIELD, wrong.text
    twice = bare.post("/api/home", json=json_home, headers=[(HEADER, TEST_KEY), (HEADER, TEST_KEY)])
    assert twice.status_code == 401, twice.text
    # the right key, from a web page: its Origin (or its fetch metadata) gives it away
    for browser in (
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"origin": TEST_BASE},
        {"sec-fetch-site": "cross-site"},
    ):
        r = bare.post("/api/home", json=json_home, headers={**key, **browser})
        assert r.status_code == 403, r.text
        assert r.json()["field"] == next(iter(browser)), r.text
    # the right key, a name that is not the daemon's: DNS rebinding
    for host in ("evil.example:8100", "127.0.0.1:8101", "localhost.evil.example:8100", ""):
        r = bare.post("/api/home", json=json_home, headers={**key, "host": host})
        assert r.status_code == 403 and r.json()["field"] == "host", (host, r.text)
    # the right key, the body not declared JSON: not read as JSON
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {**key, **({"content-type": content_type} if content_type else {})}
        r = bare.post("/api/home", content=b'{"cell_clear":true}', headers=headers)
        assert r.status_code == 415, (content_type, r.text)
        assert r.json()["field"] == "content-type", r.text
    r = bare.post("/api/next", headers={**key, "content-type": "text/plain"})
    assert r.status_code == 415 and r.json()["field"] == "content-type", r.text
    assert daemon.status()["state"] == "idle"
    np.testing.assert_allclose(_joints(daemon), before, atol=0.01)

    # and all of it right: the console's own request homes the arm
    homed = bare.post("/api/home", json=json_home, headers=key)
    assert homed.status_code == 200, homed.text
    assert homed.json()["at_home"] is True
    for name in ("localhost:8100", "LOCALHOST:8100"):
        assert bare.get("/api/status", headers={**key, "host": name}).status_code == 200


def test_the_websockets_refuse_a_page_and_a_keyless_client(
    daemon: StationDaemon, bare: TestClient
) -> None:
    """Cross-site WebSocket hijacking: a page may open a WebSocket to any
    origin; the handshake is answered with the refusal instead."""
    key = {HEADER: TEST_KEY}
    for path in ("/api/events", "/api/preview/wrist"):
        for headers, status, field in (
            ({}, 401, FIELD),
            ({HEADER: "not-the-key"}, 401, FIELD),
            ({**key, "origin": "http://evil.example"}, 403, "origin"),
            ({**key, "host": "evil.example:8100"}, 403, "host"),
        ):
            with (
                pytest.raises(WebSocketDenialResponse) as refused,
                bare.websocket_connect(f"{TEST_WS}{path}", headers=headers),
            ):
                pass  # the handshake is answered on entering
            assert refused.value.status_code == status, (path, headers)
            assert refused.value.json()["field"] == field
    with bare.websocket_connect(f"{TEST_WS}/api/events", headers=key) as ws:
        assert ws.receive_json()["state"] == "idle"


def _request_for(route: Any) -> tuple[str, str]:
    path = route.path.replace("{camera}", "wrist")
    if isinstance(route, APIWebSocketRoute):
        return "WS", path
    (method,) = sorted(route.methods - {"HEAD"})
    return method, path


def test_every_route_refuses_a_request_without_the_key(
    daemon: StationDaemon, bare: TestClient
) -> None:
    """Structural: whatever routes the app has (one added later included),
    none answers without the key, over HTTP or WebSocket."""
    app = bare.app
    routes = [r for r in app.routes if isinstance(r, APIRoute | APIWebSocketRoute)]
    seen = {_request_for(r) for r in routes}
    # the walk covers the API's known surface (a route missing here is a test to fix)
    assert {("POST", p) for p in ACTIONS} | {
        ("GET", "/api/status"),
        ("GET", "/api/preview/wrist"),
        ("GET", "/api/reference/wrist"),
        ("WS", "/api/events"),
        ("WS", "/api/preview/wrist"),
    } <= seen
    before = _joints(daemon)
    for method, path in sorted(seen):
        if method == "WS":
            with (
                pytest.raises(WebSocketDenialResponse) as refused,
                bare.websocket_connect(f"{TEST_WS}{path}"),
            ):
                pass
            assert refused.value.status_code == 401, path
            continue
        body = ACTIONS.get(path)
        r = bare.request(method, path, json=body)
        assert r.status_code == 401, (method, path, r.status_code, r.text)
        assert r.json() == {
            "detail": f"{FIELD}: missing; the station's API answers the operator console only",
            "field": FIELD,
        }
    # and routes that do not exist say nothing either
    assert bare.get("/api/openapi.json").status_code == 401
    assert bare.get("/nope").status_code == 401
    assert daemon.status()["state"] == "idle"
    np.testing.assert_allclose(_joints(daemon), before, atol=0.01)


# -- over a real server on loopback: Host as a browser sends it --------------------------------


@pytest.fixture
def served(daemon: StationDaemon) -> Iterator[str]:
    """The API under uvicorn on a loopback port, as ``proctor station run`` serves it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(daemon, key=TEST_KEY), log_level="warning", lifespan="off", access_log=False
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


def test_a_rebound_name_is_refused_on_the_wire(daemon: StationDaemon, served: str) -> None:
    """DNS rebinding: the browser connects to 127.0.0.1 but sends the
    attacker's name in Host; only the daemon's own address and port pass."""
    port = int(served.rsplit(":", 1)[1])
    key = {HEADER: TEST_KEY}
    with httpx.Client(base_url=served, timeout=10) as http:
        assert http.get("/api/status", headers=key).json()["state"] == "idle"
        for host in (f"evil.example:{port}", f"127.0.0.1:{port + 1}", "127.0.0.1"):
            r = http.post("/api/next", headers={**key, "host": host})
            assert r.status_code == 403 and r.json()["field"] == "host", (host, r.text)
        assert (
            http.post("/api/next", headers={**EVIL, "host": f"evil.example:{port}"}).status_code
            == 403
        )
        assert (
            http.get("/api/status", headers={**key, "host": f"localhost:{port}"}).status_code == 200
        )
    assert daemon.status()["state"] == "idle"
    ws_base = "ws://" + served.removeprefix("http://")
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{ws_base}/api/events", origin="http://evil.example", additional_headers=key)
    assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{ws_base}/api/events")
    assert refused.value.response.status_code == 401
    with connect(f"{ws_base}/api/events", additional_headers=key) as ws:
        assert '"state":"idle"' in str(ws.recv(timeout=10)).replace(" ", "")


# -- the key file --------------------------------------------------------------------------------


def test_the_key_file_is_made_0600_and_refused_when_others_can_read_it(tmp_path: Path) -> None:
    path = tmp_path / "host" / "station-api.key"
    key = ensure_station_key(path)
    assert len(key) >= 32 and oct(path.stat().st_mode & 0o777) == "0o600"
    assert ensure_station_key(path) == key == read_station_key(path)  # kept, not remade
    path.chmod(0o644)
    for reader in (ensure_station_key, read_station_key):
        with pytest.raises(ConfigError, match=rf"{path}: mode 0644 .* must be 0600") as refused:
            reader(path)
        assert key not in str(refused.value)
    path.chmod(0o600)
    path.write_text("short\n")
    with pytest.raises(ConfigError, match="not a key"):
        read_station_key(path)
    link = tmp_path / "link.key"
    link.symlink_to(path)
    with pytest.raises(ConfigError, match="cannot be opened"):
        read_station_key(link)
    with pytest.raises(ConfigError, match=r"not found .* makes it on start"):
        read_station_key(tmp_path / "absent.key")


def test_the_settings_put_the_key_file_in_the_data_folder(tmp_path: Path) -> None:
    settings = load_settings(env="test", data_dir=tmp_path)
    assert settings.station_key_path == (tmp_path / "station-api.key").resolve()
    other = load_settings(env="test", data_dir=tmp_path, station_key_file=tmp_path / "k")
    assert other.station_key_path == tmp_path / "k"


def test_the_daemon_refuses_to_start_with_a_key_file_others_can_read(
    tmp_path: Path, processes: Callable[..., Any]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    key_file = data / "station-api.key"
    key_file.write_text("k" * 43 + "\n")
    key_file.chmod(0o644)
    env = clean_env(PROCTOR_DATA_DIR=str(data))
    daemon = processes([*PROCTOR, "station", "run", "--profile", "sim", "--port", "0"], env)
    daemon.wait_for(rf"station key file {key_file}: mode 0644", timeout=60)
    assert daemon.popen.wait(timeout=30) != 0
    assert "k" * 43 not in daemon.output()
    assert key_file.stat().st_mode & 0o777 == 0o644  # left for its owner to fix
