"""Clients of the station daemon's local API as the operator console is one
(no tests here): each carries the host's station key and names the daemon's
own loopback address, so that the guard (``proctor.station.api_guard``)
lets it through. A test that wants the guard to refuse it builds its request
without these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient

from proctor.core.station_key import HEADER, read_station_key
from proctor.station.console_api import create_app
from proctor.station.daemon import StationDaemon

# the key of the in-process daemons the TestClient tests build (a file-less key:
# no console reads it)
TEST_KEY = "test-station-key-" + "k" * 32
# the daemon's address as TestClient presents it: Host and the server's port agree
TEST_BASE = "http://127.0.0.1:8100"
# TestClient's websocket_connect joins a relative path to ws://testserver: give it
# the daemon's own address instead
TEST_WS = "ws://127.0.0.1:8100"


def station_app(daemon: StationDaemon, key: str = TEST_KEY) -> FastAPI:
    return create_app(daemon, key=key)


def station_client(daemon: StationDaemon, key: str = TEST_KEY, **kw: Any) -> TestClient:
    """A TestClient into ``daemon``'s local API that the console could be."""
    return TestClient(station_app(daemon, key), base_url=TEST_BASE, headers={HEADER: key}, **kw)


def key_headers(key_file: Path) -> dict[str, str]:
    """The header that carries the key the daemon made in ``key_file``."""
    return {HEADER: read_station_key(key_file)}


def daemon_http(base: str, data_dir: Path, **kw: Any) -> httpx.Client:
    """An HTTP client of a ``proctor station run`` subprocess whose data folder
    (``PROCTOR_DATA_DIR``) is ``data_dir``: the daemon made its key there."""
    return httpx.Client(base_url=base, headers=key_headers(data_dir / "station-api.key"), **kw)
