"""A station host that reaches the server over the station API only.

``open_remote_station`` builds the daemon of such a host: its ledger (a
SQLite database with the Proctor schema in the station's data folder,
migrated on first use), its local artifact store, the outbox, the client,
the forwarder and the remote work source. No database URL is read or
needed: the runner writes to the ledger and the local store exactly as it
writes to a server's database on a single-host install, and the forwarder
brings the server up to date whenever it can be reached.

Layout of ``<data>/station/<name>/``: ``ledger.db`` (episodes, events,
artifacts), ``artifacts/`` (the local store), ``uplink.db`` (the outbox),
``spool/`` (recordings in progress).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import migrate
from proctor.core.db.engine import ProctorSession, make_engine, make_session_factory
from proctor.core.db.opening import schema_state
from proctor.core.errors import UsageError
from proctor.core.station_api_wire import Hello
from proctor.core.station_credentials import TOKEN_ENV, token_from_environment
from proctor.station.config import StationConfig
from proctor.station.daemon import StationDaemon
from proctor.station.uplink.client import DEFAULT_TIMEOUT_S, StationApiClient
from proctor.station.uplink.forwarder import Forwarder, SendParts
from proctor.station.uplink.outbox import Outbox
from proctor.station.uplink.remote_work_source import RemoteWorkSource


@dataclass(frozen=True)
class StationFolder:
    """Where a station host keeps its ledger, store, outbox and spool."""

    root: Path

    @classmethod
    def of(cls, data_dir: Path, config: StationConfig) -> StationFolder:
        return cls(Path(data_dir) / "station" / config.name)

    @property
    def ledger_url(self) -> str:
        return f"sqlite:///{(self.root / 'ledger.db').resolve()}"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def outbox(self) -> Path:
        return self.root / "uplink.db"

    def spool(self, config: StationConfig) -> Path:
        return Path(config.spool_dir) if config.spool_dir is not None else self.root / "spool"


def open_ledger(folder: StationFolder) -> sessionmaker[ProctorSession]:
    """The station's ledger, migrated to this code's schema on first use (it
    is the station's own file: nobody else shares it); one migrated by a
    newer Proctor is refused."""
    folder.root.mkdir(parents=True, exist_ok=True)
    state = schema_state(folder.ledger_url)
    if state.newer:
        raise UsageError(f"station ledger {folder.root / 'ledger.db'}: {state.problem()}")
    if not state.up_to_date:
        migrate.upgrade(folder.ledger_url)
    return make_session_factory(make_engine(folder.ledger_url))


def layout_hash(config: StationConfig, profile: str) -> str:
    """sha256 of what defines the cell's layout: the profile's section, the
    cameras, and the commissioned-cell file's bytes (totes, camera poses)."""
    doc: dict[str, object] = {
        "profile": profile,
        "section": config.profile_section(profile),
        "cameras": {n: c.model_dump(mode="json") for n, c in sorted(config.cameras.items())},
    }
    if config.commissioned is not None and Path(config.commissioned).is_file():
        doc["commissioned"] = hashlib.sha256(Path(config.commissioned).read_bytes()).hexdigest()
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def software_version() -> str:
    try:
        return metadata.version("proctor")[:64]
    except metadata.PackageNotFoundError:
        return "unknown"


def hello_builder(config: StationConfig, profile: str) -> Hello:
    """The hello of this station (``waiting`` and the clock are filled per call)."""
    return Hello(
        station=config.name,
        profile=profile,  # type: ignore[arg-type]  # validated by the wire
        site=config.site,
        cell_profile=config.cell_profile,
        layout_hash=layout_hash(config, profile),
        software_version=software_version(),
        station_time=datetime.now(UTC),
    )


def open_remote_station(
    config: StationConfig,
    profile: str,
    *,
    data_dir: Path,
    server: str,
    token: str,
    campaign: int | str,
    heartbeat_s: float | None = None,
    timeout_s: float | None = None,
    send_parts: SendParts | None = None,
) -> StationDaemon:
    """The daemon of a station host that talks only HTTPS to ``server``.

    Its forwarder is started (it says hello at once); ``daemon.close()``
    stops it. ``daemon.uplink`` is a ``ServerLink`` (``.forwarder``,
    ``.drain(timeout)``, ``.status()``), ``daemon.source`` the
    ``RemoteWorkSource``."""
    uplink = config.uplink
    heartbeat = heartbeat_s or (uplink.heartbeat_s if uplink else 10.0)
    timeout = timeout_s or (uplink.timeout_s if uplink else DEFAULT_TIMEOUT_S)
    folder = StationFolder.of(data_dir, config)
    sessions = open_ledger(folder)
    store = LocalArtifactStore(folder.artifacts)
    client = StationApiClient(server, token, timeout_s=timeout)
    outbox = Outbox(folder.outbox)
    template = hello_builder(config, profile)
    forwarder = Forwarder(
        client=client,
        outbox=outbox,
        sessions=sessions,
        store=store,
        hello=lambda waiting: template.model_copy(update={"waiting": waiting}),
        heartbeat_s=heartbeat,
        send_parts=send_parts,
    )
    source = RemoteWorkSource(
        client=client, outbox=outbox, forwarder=forwarder, sessions=sessions, campaign=campaign
    )
    try:
        daemon = StationDaemon(
            config,
            profile,
            sessions=sessions,
            store=store,
            spool_root=folder.spool(config),
            source=source,
            uplink=ServerLink(forwarder, client, outbox),
        )
    except BaseException:
        client.close()
        outbox.close()
        raise
    forwarder.start()
    return daemon


def open_configured_station(
    config: StationConfig,
    profile: str,
    *,
    data_dir: Path,
    server: str | None = None,
    campaign: str | None = None,
    environ: dict[str, str] | None = None,
) -> StationDaemon:
    """``open_remote_station`` as ``proctor station run`` opens it: the server
    and campaign from the arguments or the config's ``[uplink]``, the token
    from ``PROCTOR_STATION_TOKEN`` only (never a file)."""
    uplink = config.uplink
    server = server or (uplink.server if uplink else None)
    chosen: int | str | None = campaign or (uplink.campaign if uplink else None)
    if not server:
        raise UsageError("--server: name the server (or set [uplink] server in the config)")
    if chosen is None or chosen == "":
        raise UsageError("--campaign: name the campaign (or set [uplink] campaign)")
    token = token_from_environment(environ)
    if token is None:
        raise UsageError(f"{TOKEN_ENV}: the station's token is not set (proctor station enrol)")
    if isinstance(chosen, str) and chosen.isdigit():
        chosen = int(chosen)
    return open_remote_station(
        config, profile, data_dir=data_dir, server=server, token=token, campaign=chosen
    )


class ServerLink:
    """The forwarder as the daemon's uplink: closing it closes the client and the outbox."""

    def __init__(self, forwarder: Forwarder, client: StationApiClient, outbox: Outbox) -> None:
        self.forwarder = forwarder
        self._client = client
        self._outbox = outbox

    def status(self) -> dict[str, object]:
        return self.forwarder.status()

    def nudge(self) -> None:
        self.forwarder.nudge()

    def watch(self, callback: Callable[[], None]) -> None:
        self.forwarder.watch(callback)

    def drain(self, timeout: float) -> bool:
        return self.forwarder.drain(timeout)

    def close(self) -> None:
        self.forwarder.close()
        self._client.close()
        self._outbox.close()
