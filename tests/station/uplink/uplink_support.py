"""Shared pieces of the uplink's tests: a station ledger in a temporary
folder, episodes written into it the way the runner writes them, the fake
station-API server (``fake_station_server``) and a forwarder pointed at it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import sessionmaker

from proctor.core import episode_record
from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.engine import ProctorSession
from proctor.core.domain import ArtifactKind, Outcome
from proctor.core.station_api_wire import Hello, WorkWire
from proctor.core.work import Work
from proctor.station import episodes
from proctor.station.uplink.client import StationApiClient
from proctor.station.uplink.forwarder import Forwarder
from proctor.station.uplink.outbox import Outbox
from proctor.station.uplink.remote import StationFolder, open_ledger
from tests.station.uplink.fake_station_server import FakeStationServer, parts_sender

TOKEN = "pst_" + "t" * 43
LAYOUT = "ab" * 32


@dataclass
class Ledger:
    root: Path
    sessions: sessionmaker[ProctorSession]
    store: LocalArtifactStore

    @classmethod
    def open(cls, root: Path) -> Ledger:
        folder = StationFolder(root)
        return cls(root, open_ledger(folder), LocalArtifactStore(folder.artifacts))


def work(run_code: str, items: int = 2) -> Work:
    return Work(
        run_code=run_code,
        object_name="towels",
        items=items,
        per_item_cap_s=10.0,
        tote_side="left",  # type: ignore[arg-type]
        camera_side="right",  # type: ignore[arg-type]
        policy_url="ws://127.0.0.1:9/policy/never-dialled",
    )


def write_episode(
    ledger: Ledger, run_code: str, *, close: bool = True, artifact: bytes | None = None
) -> str:
    """An episode as the runner leaves it: armed, running, finishing, its
    artifacts registered, awaiting its log, and (``close``) the operator's log."""
    w = work(run_code)
    with session_scope(ledger.sessions) as s:
        station = episodes.ensure_station(s, name="cell-up", profile="sim")
        obj = episodes.ensure_object_type(s, name=w.object_name)
        ep = episodes.create_episode(s, work=w, station=station, object_type=obj)
        episodes.mark_running(s, episode=ep, clock_start_s=1.0)
        episodes.mark_finishing(
            s, episode=ep, clock_end_s=9.0, proposed=Outcome.success, reason="all items placed"
        )
        if artifact is not None:
            stored = ledger.store.put_bytes(artifact)
            episodes.register_artifacts(
                s,
                episode=ep,
                files=[
                    episodes.StoredFile(
                        kind=ArtifactKind.telemetry,
                        sha256=stored.sha256,
                        size_bytes=stored.size_bytes,
                        uri=stored.uri,
                        media_type="application/vnd.apache.parquet",
                    )
                ],
            )
        episodes.mark_awaiting_log(s, episode=ep)
        uid = ep.uid
    if close:
        close_episode(ledger, uid)
    return uid


def close_episode(ledger: Ledger, uid: str, operator_label: str | None = None) -> None:
    entry = episode_record.OperatorLog(2, 0, 0, Outcome.success, "both towels in")
    with session_scope(ledger.sessions) as s:
        episodes.submit_log(s, uid=uid, log=entry, operator_label=operator_label)


def hello_template() -> Hello:
    from datetime import UTC, datetime

    return Hello(
        station="cell-up",
        profile="sim",
        layout_hash=LAYOUT,
        software_version="test",
        station_time=datetime.now(UTC),
    )


def work_wire(run_code: str, **extra: Any) -> WorkWire:
    data: dict[str, Any] = {
        "run_code": run_code,
        "campaign_id": 7,
        "object": "towels",
        "items": 2,
        "per_item_cap_s": 30.0,
        "tote_side": "left",
        "camera_side": "right",
        "gateway_path": "/policy/h-opaque",
    }
    data.update(extra)
    return WorkWire(**data)


@pytest.fixture
def fake() -> Iterator[FakeStationServer]:
    server = FakeStationServer(TOKEN).start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Link:
    ledger: Ledger
    client: StationApiClient
    outbox: Outbox
    forwarder: Forwarder


@pytest.fixture
def link(fake: FakeStationServer, tmp_path: Path) -> Iterator[Callable[..., Link]]:
    """``link(token=TOKEN, start=True)``: a ledger, an outbox and a forwarder
    talking to the fake server; all closed at the end."""
    made: list[Link] = []

    def make(token: str = TOKEN, start: bool = True, timeout_s: float = 5.0) -> Link:
        ledger = Ledger.open(tmp_path / "station")
        client = StationApiClient(fake.url, token, timeout_s=timeout_s)
        outbox = Outbox(tmp_path / "station" / "uplink.db")
        template = hello_template()
        forwarder = Forwarder(
            client=client,
            outbox=outbox,
            sessions=ledger.sessions,
            store=ledger.store,
            hello=lambda waiting: template.model_copy(update={"waiting": waiting}),
            heartbeat_s=0.5,
            send_parts=parts_sender(),
        )
        if start:
            forwarder.start()
        made.append(Link(ledger, client, outbox, forwarder))
        return made[-1]

    yield make
    for m in made:
        m.forwarder.close()
        m.client.close()
        m.outbox.close()


def until(check: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.05)
