"""Fixtures for tests that need committed rows seen by other connections,
threads or processes (the gateway, concurrent stations, a killed worker)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import uvicorn
from fastapi import FastAPI
from sqlalchemy.orm import sessionmaker

from proctor.cli import main
from proctor.core.db import migrate
from proctor.core.db.engine import ProctorSession, make_engine, make_session_factory
from proctor.scheduler.endpoint_keys import generate_encryption_key
from proctor.scheduler.gateway import GatewayConfig, gateway_router
from tests.conftest import BACKENDS

if TYPE_CHECKING:
    from proctor.station.daemon import StationDaemon


@dataclass
class CommittedDb:
    backend: str
    url: str
    factory: sessionmaker[ProctorSession]

    @contextlib.contextmanager
    def session(self) -> Iterator[ProctorSession]:
        s = self.factory()
        try:
            yield s
            s.commit()
        except BaseException:
            s.rollback()
            raise
        finally:
            s.close()


@pytest.fixture(scope="session", params=BACKENDS)
def committed_db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CommittedDb]:
    """A migrated database per backend, shared by the scheduler's multi-connection
    tests; each test makes its own uniquely named rows and commits them."""
    backend = str(request.param)
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('sched') / 'scheduler.db'}"
    else:
        url = request.getfixturevalue("postgres_databases").create("sched")
    migrate.upgrade(url)
    engine = make_engine(url)
    yield CommittedDb(backend, url, make_session_factory(engine))
    engine.dispose()


class ServerThread:
    """A real uvicorn server on a loopback port, in a thread."""

    def __init__(self, app: FastAPI, *, loop: str = "auto") -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", ws_max_size=64 << 20, loop=loop
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> ServerThread:
        self._thread.start()
        for _ in range(500):
            if self._server.started:
                return self
            threading.Event().wait(0.01)
        raise RuntimeError("uvicorn did not start")

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


@dataclass
class Gateway:
    base: str  # ws://127.0.0.1:PORT
    encryption_key: str
    db: CommittedDb


@pytest.fixture(scope="session")
def gateway(committed_db: CommittedDb) -> Iterator[Gateway]:
    key = generate_encryption_key()
    app = FastAPI()
    app.include_router(
        gateway_router(
            GatewayConfig(
                session_factory=committed_db.factory,
                encryption_key=key,
                connect_timeout_s=2.0,
                # the tests' policy servers are on loopback
                allow_private_endpoints=True,
            )
        )
    )
    with ServerThread(app) as server:
        yield Gateway(f"ws://127.0.0.1:{server.port}", key, committed_db)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sim_station(gateway: Gateway, campaign: int, name: str, tmp_path: Path) -> StationDaemon:
    """A station daemon on the simulated cell (small cameras, virtual clock)
    that works ``campaign`` through the test gateway, enrolled and proving
    itself with its token as a deployed station does; not yet opened."""
    from proctor.core.artifacts import open_store
    from proctor.scheduler.campaign_work_source import CampaignWorkSource
    from proctor.station.config import load_station_config
    from proctor.station.daemon import StationDaemon
    from tests.scheduler.builders import station_token

    with gateway.db.session() as s:
        token = station_token(s, name)
    config = load_station_config(
        None,
        name=name,
        cameras={
            "exterior": {"width": 96, "height": 72, "fps": 5},
            "wrist": {"width": 96, "height": 72, "fps": 5},
        },
        sim={"clock": "virtual"},
    )
    return StationDaemon(
        config,
        "sim",
        sessions=gateway.db.factory,
        store=open_store(str(tmp_path / "artifacts")),
        spool_root=tmp_path / "spool",
        source=CampaignWorkSource(
            session_factory=gateway.db.factory,
            campaign=campaign,
            station=name,
            gateway=gateway.base,
            station_token=token,
        ),
    )


def work_the_campaign(
    daemon: StationDaemon, *, timeout: float = 120, skip_unreachable: bool = False
) -> list[str]:
    """A stand-in operator works every run the (opened) station can claim now:
    home (nothing homes on its own), arm, start, close the log with the
    simulated cell's ground truth. Returns why it skipped the runs it skipped
    (a policy it cannot reach, only with ``skip_unreachable``)."""
    import time

    from proctor.station.daemon import NoWork
    from proctor.station.episode_runner import PolicyUnreachable, RunnerState

    def wait(state: RunnerState) -> None:
        deadline = time.monotonic() + timeout
        while daemon.runner.state != state:
            if time.monotonic() > deadline:
                raise AssertionError(f"the station did not reach {state.value}")
            daemon.wait_change(daemon.version, 0.5)

    skipped: list[str] = []
    while True:
        daemon.home_arm(cell_clear=True, open_gripper=True)
        try:
            status = daemon.next_run()
        except NoWork:
            return skipped
        except PolicyUnreachable as exc:
            if not skip_unreachable:
                raise
            skipped.append(str(exc))
            continue
        assert status["state"] == RunnerState.armed.value
        daemon.start()
        wait(RunnerState.awaiting_log)
        daemon.close_with_ground_truth()
        wait(RunnerState.idle)


@pytest.fixture
def proctor(committed_db: CommittedDb, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path):
    for key in ("PROCTOR_CONFIG", "PROCTOR_DEBUG"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PROCTOR_DATABASE_URL", committed_db.url)
    monkeypatch.setenv("PROCTOR_DATA_DIR", str(tmp_path))

    def run(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        out, err = capsys.readouterr()
        return int(exc.value.code or 0), out, err

    return run
