"""What the console tests share (no tests here): a real station daemon on the
simulated cell serving its local API on a loopback port in this process,
scripted demo policies over the real policy wire, and small waits.
The daemon makes the station key in the console's key file
(``settings.station_key_file``), as ``proctor station run`` does, and the
console reads it from there.

Everything started here is stopped in a ``finally``, pass or fail: the
uvicorn thread, the daemon (which stops a running episode and its cameras)
and the policy servers.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from proctor.core.artifacts import open_store
from proctor.core.db import make_engine, make_session_factory
from proctor.core.station_key import ensure_station_key
from proctor.core.work import Work, WorkSource
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.station.config import load_station_config
from proctor.station.console_api import create_app as station_app
from proctor.station.daemon import StationDaemon
from proctor.station.work_source import AdHocWorkSource
from tests.browser import LiveServer


def bind_loopback() -> socket.socket:
    """A bound loopback socket: its port is known before anything listens on it
    (the web app is configured with the station's URL before the station runs)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def closed_port_url() -> str:
    """An http:// URL on loopback where nothing listens (a station that is down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def sock_url(sock: socket.socket) -> str:
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


# the fixtures the console's test modules share: import them by name
@pytest.fixture
def station_sock() -> Iterator[socket.socket]:
    """A loopback socket the test's station daemon will serve its local API on."""
    sock = bind_loopback()
    yield sock
    sock.close()


@pytest.fixture
def live_server(
    start_live_server: Callable[..., LiveServer], station_sock: socket.socket
) -> LiveServer:
    """The app, with its console pointed at this test's station."""
    return start_live_server(web={"station_url": sock_url(station_sock)})


@contextmanager
def running_station(
    *,
    sock: socket.socket,
    db_url: str,
    artifacts: str,
    spool: Path,
    source: WorkSource,
    key_file: Path,
    clock: str = "virtual",
    name: str = "cell-console",
) -> Iterator[StationDaemon]:
    """``proctor station run --profile sim`` in this process: the daemon and its
    local API under uvicorn on ``sock`` (loopback), until the block ends; its
    key is in ``key_file`` (the console's ``settings.station_key_path``)."""
    config = load_station_config(
        None,
        name=name,
        cameras={
            "exterior": {"width": 160, "height": 120, "fps": 10},
            "wrist": {"width": 160, "height": 120, "fps": 10},
        },
        sim={"clock": clock},
        api={"preview_fps": 10.0},
    )
    engine = make_engine(db_url)
    daemon = StationDaemon(
        config,
        "sim",
        sessions=make_session_factory(engine),
        store=open_store(artifacts),
        spool_root=spool,
        source=source,
    )
    try:
        with serving_station(daemon, sock, key_file=key_file):
            yield daemon
    finally:
        engine.dispose()


@contextmanager
def serving_station(
    daemon: StationDaemon, sock: socket.socket, *, key_file: Path
) -> Iterator[StationDaemon]:
    """Open ``daemon`` and serve its local API under uvicorn on ``sock``
    (loopback), with the key in ``key_file`` (made if absent), until the block
    ends; then close both."""
    app = station_app(daemon, key=ensure_station_key(key_file))
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    try:
        daemon.open()
        thread.start()
        deadline = time.monotonic() + 15
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the station's API did not start within 15 s")
            time.sleep(0.02)
        yield daemon
    finally:
        server.should_exit = True
        if thread.is_alive():
            thread.join(timeout=15)
        daemon.close()
        sock.close()


@contextmanager
def demo_policies(
    *profiles: str, wrap: Callable[[Any], Any] | None = None
) -> Iterator[list[PolicyServer]]:
    """Scripted demo policies, each a real WebSocket server on loopback."""
    servers: list[PolicyServer] = []
    try:
        for i, profile in enumerate(profiles):
            policy = DemoPolicy(profile, seed=i)
            servers.append(PolicyServer(wrap(policy) if wrap else policy).start())
        yield servers
    finally:
        for server in servers:
            server.stop()


def adhoc_source(
    policy_url: str, *, items: int = 2, cap_s: float = 20.0, repeat: int = 5
) -> AdHocWorkSource:
    return AdHocWorkSource(
        Work(
            run_code="X-CONSOLE",
            object_name="spoons",
            items=items,
            per_item_cap_s=cap_s,
            tote_side="left",
            camera_side="right",
            policy_url=policy_url,
            sim_seed=3,
        ),
        repeat=repeat,
    )


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``predicate`` (wall clock) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)
