"""The operator console of a station host that keeps its own ledger, in
headless Chromium: the bar says whether the server is there and how many
episodes wait for it ("offline, 1 episode waiting"), and the whitelist
passes the uplink's status and nothing more.

The station's server here is the fake station-API server
(tests/station/uplink/fake_station_server.py, a stand-in for the contract; the
end-to-end tests use the real one); the console is the real app."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from proctor.core.domain import Role
from proctor.core.station_key import ensure_station_key
from proctor.station.console_api import create_app as station_app
from proctor.station.daemon import StationDaemon
from proctor.station.uplink.remote import StationFolder, open_remote_station
from proctor.web.console.view import public_status
from tests.browser import LiveServer, sign_in
from tests.station.conftest import sim_config
from tests.station.uplink.fake_station_server import FakeStationServer, parts_sender
from tests.station.uplink.uplink_support import TOKEN, Ledger, write_episode
from tests.station.uplink.uplink_support import fake as fake  # the fixture
from tests.web.console_support import live_server as live_server  # the fixture
from tests.web.console_support import station_sock as station_sock  # the fixture


@pytest.fixture
def remote_station(
    live_server: LiveServer, station_sock: socket.socket, fake: FakeStationServer, tmp_path: Path
) -> Iterator[StationDaemon]:
    daemon = open_remote_station(
        sim_config(name="cell-ledger", api={"preview_fps": 10.0}),
        "sim",
        data_dir=tmp_path / "station-data",
        server=fake.url,
        token=TOKEN,
        campaign="spring",
        heartbeat_s=0.5,
        send_parts=parts_sender(),
    )
    app = station_app(daemon, key=ensure_station_key(live_server.settings.station_key_path))
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [station_sock]}, daemon=True)
    try:
        daemon.open()
        thread.start()
        deadline = time.monotonic() + 15
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the station did not start"
            time.sleep(0.02)
        yield daemon
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        daemon.close()


def _text_becomes(page: Any, selector: str, text: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (seen := page.locator(selector).inner_text()) != text:
        assert time.monotonic() < deadline, f"{selector}: {seen!r}, not {text!r}"
        page.wait_for_timeout(100)


@pytest.mark.browser
def test_the_console_says_when_the_server_is_away_and_what_waits(
    live_server: LiveServer,
    remote_station: StationDaemon,
    fake: FakeStationServer,
    page: Any,
    tmp_path: Path,
) -> None:
    live_server.add_user("olga", Role.operator)
    sign_in(page, "olga")
    page.goto("/console")
    _text_becomes(page, "#uplink-state", "server: up to date")
    fake.stop()
    # an episode in the ledger the server has not seen (as a run left it)
    ledger = Ledger.open(StationFolder.of(tmp_path / "station-data", remote_station.config).root)
    write_episode(ledger, "R-CONS1")
    remote_station.uplink.nudge()  # type: ignore[union-attr]  # as a run's change would
    _text_becomes(page, "#uplink-state", "offline, 1 episode waiting")
    assert "alert" in (page.get_attribute("#uplink-state", "class") or "")
    fake.start()  # the forwarder finds it on its own (backoff) and delivers the episode
    _text_becomes(page, "#uplink-state", "server: up to date")


def test_the_uplink_passes_the_whitelist_and_no_more() -> None:
    raw = {
        "state": "idle",
        "uplink": {
            "online": False,
            "waiting": 3,
            "uploading": "abcdef/0123",
            "last_error": "the server did not answer (ConnectError)",
            "clock_offset_s": 0.2,
            "token": "pst_secret",
        },
    }
    view = public_status(raw)
    assert view.uplink is not None and (view.uplink.online, view.uplink.waiting) == (False, 3)
    text = view.model_dump_json()
    assert "pst_secret" not in text and "abcdef" not in text
    assert public_status({"state": "idle"}).uplink is None
