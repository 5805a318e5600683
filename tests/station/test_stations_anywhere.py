"""Stations anywhere, end to end: station hosts that hold only a server URL
and a token run a campaign against a server on PostgreSQL with an
S3-compatible store, and lose or repeat nothing when a part of it fails.

Everything is real and on loopback. The server is ``proctor serve`` in its
own process (so that it can be stopped and brought back on its port), on a
migrated PostgreSQL database of its own; its artifact store is an S3 bucket
on moto's S3 server (its own process), reached through a loopback HTTP proxy
that the test can slow down and that records every part a station uploads;
the store's keys are in the server's environment only. The policies are the
scripted demo policies served over the openpi WebSocket protocol. Each
station is its own process (``tests/station/remote_station_proc.py``: the
daemon on the simulated cell, virtual clock, and a stand-in operator who
closes each episode with the cell's ground-truth log), started with a config
naming the server and a token in its environment, nothing else (asserted
from ``/proc/<pid>/environ`` and its config file).

The wire-level faults (a revoked token, another station's run or handle, a
replayed upload) are spoken in raw HTTP by the test itself, as a hostile or
confused station host would: the station's own client would never send them.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import sqlalchemy as sa

from proctor.core import station_api_wire as wire
from proctor.core import station_credentials
from proctor.core.audit import Actor
from proctor.core.db import migrate
from proctor.core.db.engine import make_engine, make_session_factory, session_scope
from proctor.core.db.models import Artifact, Assignment, Episode, ObjectType
from proctor.core.domain import AssignmentStatus, EpisodeState, PolicyKind
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.scheduler import service
from proctor.scheduler.endpoint_keys import generate_encryption_key
from proctor.scheduler.protocol import parse_protocol
from tests.backends import only_on
from tests.scheduler.builders import endpoint_policy

pytestmark = [pytest.mark.slow, only_on("postgresql")]

REPO = Path(__file__).resolve().parents[2]
BUCKET = "proctor-anywhere"
STORE_KEY, STORE_SECRET = "anywhere-key", "anywhere-secret"
ARMS = {"reference": PolicyKind.reference, "swift": PolicyKind.policy, "steady": PolicyKind.policy}
OBJECT = "spoons"
CONFIGS = [{"tote": "left", "camera": "left"}, {"tote": "right", "camera": "left"}]
BLOCKS = 2  # episodes per (arm, object) cell: 3 arms × 1 object × 2 = 6 runs
# a short claim lease, so that the revoked station's claim comes back within the test
LEASE_S = 5.0  # the shortest lease the settings accept
# a run skipped at pre-flight is offered again well inside the stations' idle time
# (IDLE_EXIT_S, tests/station/remote_station_proc.py)
PREFLIGHT_RETRY_S = 2.0
# small parts, so that even the simulated cell's small recordings upload in
# several (moto is told to accept parts this small; S3 wants 5 MiB but the last)
PART_BYTES = 64 * 1024
# the server's part-size setting (scheduler.upload_part_bytes)
SERVER_PART_SETTING = "PROCTOR_SCHEDULER__UPLOAD_PART_BYTES"
# names that would let a station host reach the database or the store itself
SERVER_SECRET_NAMES = re.compile(
    r"^(AWS_\w*|PROCTOR_DATABASE_URL|PROCTOR_DB_URL|PROCTOR_ARTIFACTS|PROCTOR_SECRET_KEY|"
    r"PROCTOR_ENCRYPTION_KEY|PROCTOR_CONFIG)$"
)
SERVER_SECRETS_IN_TEXT = re.compile(
    r"postgresql|sqlite|database|s3://|aws_|AWS_|endpoint_url|secret|artifacts\s*=", re.I
)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 240.0) -> Any:
    """Poll ``check`` until it returns something true; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:g} s")
        time.sleep(0.2)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the S3-compatible store: moto's server, behind a proxy the test controls ----------------


class S3Process:
    """moto's S3 server in its own process on a loopback port."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "S3_UPLOAD_PART_MIN_SIZE": "1024"}
        argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.origin = f"http://127.0.0.1:{self.port}"

        def up() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(self.origin, timeout=2).status_code < 500
            return False

        wait_for("moto's S3 server answers", up, 60)
        import boto3

        boto3.client(
            "s3",
            endpoint_url=self.origin,
            region_name="us-east-1",
            aws_access_key_id=STORE_KEY,
            aws_secret_access_key=STORE_SECRET,
        ).create_bucket(Bucket=BUCKET)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)


@dataclass
class PartPut:
    upload_id: str
    number: int
    status: int
    at: float


class S3Proxy:
    """A loopback HTTP proxy in front of moto. The server's store and the
    presigned URLs it issues name this origin. It records every multipart
    part PUT and completion, and can slow part bodies down to ``rate_bps``
    (so that a station can be killed mid-upload)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.rate_bps = 0.0  # 0: as fast as it goes
        self.parts: list[PartPut] = []
        self.completed: list[str] = []  # upload ids whose completion moto accepted
        self.receiving: Counter[str] = Counter()  # upload id → part bodies being read now
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> bytes | None:
                length = int(self.headers.get("Content-Length") or 0)
                query = parse_qs(urlsplit(self.path).query)
                slow = self.command == "PUT" and "partNumber" in query and proxy.rate_bps > 0
                chunks, got = [], 0
                while got < length:
                    chunk = self.rfile.read(min(16384, length - got))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    got += len(chunk)
                    if slow:
                        time.sleep(len(chunk) / proxy.rate_bps)
                # a sender killed mid-body: forward nothing (as a dropped link would)
                return b"".join(chunks) if got == length else None

            def _forward(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                part_of = (query.get("uploadId") or [""])[0] if "partNumber" in query else ""
                with proxy._lock:
                    proxy.receiving[part_of] += 1
                try:
                    body = self._body()
                finally:
                    with proxy._lock:
                        proxy.receiving[part_of] -= 1
                if body is None:
                    self.close_connection = True
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                proxy.record(self.command, self.path, answer.status)
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def record(self, method: str, path: str, status: int) -> None:
        query = parse_qs(urlsplit(path).query)
        upload = (query.get("uploadId") or [""])[0]
        with self._lock:
            if method == "PUT" and upload and "partNumber" in query:
                self.parts.append(PartPut(upload, int(query["partNumber"][0]), status, time.time()))
            elif method == "POST" and upload and status == 200:
                self.completed.append(upload)

    def parts_of(self, upload_id: str, before: float | None = None) -> set[int]:
        with self._lock:
            return {
                p.number
                for p in self.parts
                if p.upload_id == upload_id
                and p.status == 200
                and (before is None or p.at < before)
            }

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# -- the server ------------------------------------------------------------------------------


class ServerProcess:
    """``proctor serve`` as deployed, in its own process, on a fixed port so
    that it can be brought back where the stations look for it."""

    def __init__(self, db_url: str, data: Path, s3_origin: str) -> None:
        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        self.log = data / "serve.log"
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("PROCTOR_", "AWS_"))}
        # the store's keys are the server's, in its environment only
        self.env = clean | {
            "PROCTOR_ENV": "test",
            "PROCTOR_DATA_DIR": str(data / "server"),
            "PROCTOR_DATABASE_URL": db_url,
            "PROCTOR_ARTIFACTS": f"s3://{BUCKET}/artifacts",
            "PROCTOR_ENCRYPTION_KEY": generate_encryption_key(),
            "PROCTOR_SCHEDULER__CLAIM_LEASE_S": str(LEASE_S),
            # a run skipped at pre-flight (the server was down when a station
            # reached for its policy) is offered again well inside the stations'
            # idle time, not after the 300 s default: the campaign still ends done
            "PROCTOR_SCHEDULER__PREFLIGHT_RETRY_S": str(PREFLIGHT_RETRY_S),
            SERVER_PART_SETTING: str(PART_BYTES),
            "AWS_ACCESS_KEY_ID": STORE_KEY,
            "AWS_SECRET_ACCESS_KEY": STORE_SECRET,
            "AWS_ENDPOINT_URL": s3_origin,
            "AWS_DEFAULT_REGION": "us-east-1",
            "PYTHONPATH": str(REPO),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "proctor", "serve", "--host", "127.0.0.1"]
        argv += ["--port", str(self.port), "--no-migrate"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO
            )
        proc = self.proc

        def up() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"proctor serve exited ({proc.returncode}):\n{self.log_text()}")
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(self.origin + "/api/health", timeout=2).status_code == 200
            return False

        wait_for("the server answers", up, 90)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


# -- a station host, as its own process -----------------------------------------------------


@dataclass
class StationProcess:
    name: str
    token: str = field(repr=False)
    root: Path
    server: str
    campaign: int
    camera: tuple[int, int, int] = (96, 72, 5)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def config(self) -> Path:
        return self.root / "station.toml"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    def write_config(self) -> None:
        w, h, fps = self.camera
        cameras = "".join(
            f"[cameras.{c}]\nwidth = {w}\nheight = {h}\nfps = {fps}\n\n"
            for c in ("exterior", "wrist")
        )
        self.config.write_text(
            f'name = "{self.name}"\n\n{cameras}[sim]\nclock = "virtual"\n\n'
            f'[uplink]\nserver = "{self.server}"\ncampaign = {self.campaign}\nheartbeat_s = 1.0\n'
        )

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.write_config()
        # a station host's whole environment: no database, no store, no server settings
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.root),
            "PYTHONPATH": str(REPO),
            "PROCTOR_DATA_DIR": str(self.root / "data"),
            "PROCTOR_STATION_TOKEN": self.token,
            "PROCTOR_LOG_LEVEL": "WARNING",
        }
        argv = [sys.executable, "-m", "tests.station.remote_station_proc"]
        with (self.root / "station.log").open("ab") as out:
            self.proc = subprocess.Popen(
                [*argv, str(self.config), str(self.events)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )

    def opened(self) -> bool:
        """The daemon is open (False while starting; fails if the process died)."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            log = (self.root / "station.log").read_text(errors="replace")
            pytest.fail(f"station {self.name} exited {self.proc.returncode}:\n{log[-4000:]}")
        return bool(self.records("open"))

    def environ(self) -> dict[str, str]:
        assert self.proc is not None
        raw = Path(f"/proc/{self.proc.pid}/environ").read_bytes()
        return dict(e.split("=", 1) for e in raw.decode().split("\0") if "=" in e)

    def records(self, event: str) -> list[dict[str, Any]]:
        import json

        if not self.events.exists():
            return []
        out = []
        for line in self.events.read_text().splitlines():
            with contextlib.suppress(ValueError):  # a line cut short by SIGKILL
                record = json.loads(line)
                if record.get("event") == event:
                    out.append(record)
        return out

    def wait(self, timeout: float = 420.0) -> None:
        assert self.proc is not None
        proc = self.proc
        wait_for(f"station {self.name} finishes", lambda: proc.poll() is not None, timeout)
        log = (self.root / "station.log").read_text(errors="replace")
        assert proc.returncode == 0, f"station {self.name} exited {proc.returncode}:\n{log[-4000:]}"

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(20)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            Path(f"{self.events}.stop").touch()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# -- the site: database, store, policies, server, a campaign ---------------------------------


@dataclass
class Site:
    db_url: str
    tmp: Path
    s3: S3Process
    proxy: S3Proxy
    server: ServerProcess
    policies: dict[str, PolicyServer]
    campaign: int
    stations: list[StationProcess] = field(default_factory=list)

    @contextlib.contextmanager
    def db(self) -> Iterator[Any]:
        engine = make_engine(self.db_url)
        try:
            with session_scope(make_session_factory(engine)) as s:
                yield s
        finally:
            engine.dispose()

    def store(self) -> Any:
        """The server's store, opened with the server's keys (the test is the
        server's admin here; no station sees these)."""
        from proctor.core.artifacts.fsspec_store import FsspecArtifactStore

        return FsspecArtifactStore(
            f"s3://{BUCKET}/artifacts",
            key=STORE_KEY,
            secret=STORE_SECRET,
            client_kwargs={"endpoint_url": self.s3.origin, "region_name": "us-east-1"},
        )

    def enrol(self, name: str) -> str:
        with self.db() as s:
            issued = station_credentials.enrol(
                s, name=name, profile="sim", actor=Actor(label="test-admin")
            )
            return issued.token

    def station(self, name: str, **kw: Any) -> StationProcess:
        st = StationProcess(
            name, self.enrol(name), self.tmp / name, self.server.origin, self.campaign, **kw
        )
        self.stations.append(st)
        return st


def _campaign(db: Callable[[], Any], servers: dict[str, PolicyServer]) -> int:
    tag = secrets.token_hex(3)
    with db() as s:
        for arm, kind in ARMS.items():
            endpoint_policy(s, f"{arm}-{tag}", kind=kind, url=servers[arm].url)
        if s.scalar(sa.select(ObjectType.id).where(ObjectType.name == OBJECT)) is None:
            s.add(ObjectType(name=OBJECT, prompt=f"put the {OBJECT} into the target bin"))
        s.flush()
        protocol = {
            "name": f"anywhere-{tag}",
            "items_per_episode": 1,
            "per_item_cap_s": 20,
            "tau_s": 40,
            "episodes_per_cell": BLOCKS,
            "reference": f"reference-{tag}",
            "policies": [f"{a}-{tag}" for a in ARMS if a != "reference"],
            "objects": [OBJECT],
            "spatial_configs": CONFIGS,
        }
        c = service.create_campaign(s, protocol=parse_protocol(protocol), actor=Actor(label="t"))
        service.start_campaign(s, campaign=c.id, actor=Actor(label="t"))
        return int(c.id)


@pytest.fixture
def site(backend: str, postgres_databases: Any, tmp_path: Path) -> Iterator[Site]:
    assert backend == "postgresql"
    db_url = postgres_databases.create("anywhere")
    migrate.upgrade(db_url)
    s3 = S3Process(tmp_path / "moto.log")
    proxy = S3Proxy(s3.port)
    servers = {p: PolicyServer(DemoPolicy(p, seed=i)).start() for i, p in enumerate(ARMS)}
    server = ServerProcess(db_url, tmp_path, proxy.origin)
    built = Site(db_url, tmp_path, s3, proxy, server, servers, campaign=0)
    try:
        server.start()
        built.campaign = _campaign(built.db, servers)
        yield built
    finally:
        for st in built.stations:
            st.stop()
        server.stop()
        for p in servers.values():
            p.stop()
        proxy.stop()
        s3.stop()


# -- what the server holds afterwards --------------------------------------------------------


def assert_campaign_ran_once(site: Site, reported: list[str]) -> None:
    """Every slot done exactly once (a slot an interrupted episode requeued has
    that episode and a replacement that was done; one skipped because its
    policy could not be reached before it started, as when the server is down
    at a station's pre-flight, has no episode and a replacement), each episode
    the stations closed is on the server exactly once with its artifacts
    registered and verifiable, and the allocation sequence has no gaps and no
    repeats."""
    with site.db() as s:
        slots = list(
            s.scalars(
                sa.select(Assignment)
                .where(Assignment.campaign_id == site.campaign)
                .order_by(Assignment.sequence)
            )
        )
        episodes = list(s.scalars(sa.select(Episode).where(Episode.campaign_id == site.campaign)))
        artifacts = list(
            s.scalars(sa.select(Artifact).where(Artifact.episode_id.in_([e.id for e in episodes])))
        )
    seqs = [a.sequence for a in slots]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"gaps or repeats: {seqs}"
    ended = {AssignmentStatus.done, AssignmentStatus.requeued, AssignmentStatus.skipped}
    assert {a.status for a in slots} <= ended, [(a.run_code, a.status.value) for a in slots]
    done = [a for a in slots if a.status == AssignmentStatus.done]
    assert len(done) == len(ARMS) * BLOCKS
    requeued = {a.id for a in slots if a.status == AssignmentStatus.requeued}
    skipped = {a.id for a in slots if a.status == AssignmentStatus.skipped}
    # each replaced once
    assert {a.replaces_id for a in slots if a.replaces_id} == requeued | skipped
    per_slot = Counter(e.assignment_id for e in episodes)
    # no slot ran twice; a skipped one never ran
    assert all(per_slot[a.id] == (a.id not in skipped) for a in slots), per_slot
    ran = [a for a in slots if a.id not in skipped]
    closed = [e for e in episodes if e.state == EpisodeState.closed]
    # every done slot was closed by its operator's log; a requeued one was closed
    # too (a system ending the scheduler reran) or interrupted
    assert {a.id for a in done} <= {e.assignment_id for e in closed}
    assert {e.assignment_id for e in episodes} == {a.id for a in ran}
    assert {e.run_code for e in episodes} == {a.run_code for a in ran}
    # every episode a station closed reached the server exactly once
    uids = Counter(e.uid for e in episodes)
    assert set(reported) <= set(uids) and set(uids.values()) == {1}
    # its recordings registered, in the store, whole
    store = site.store()
    by_episode: dict[int, list[Artifact]] = {}
    for a in artifacts:
        by_episode.setdefault(a.episode_id or 0, []).append(a)
    for e in closed:
        kinds = {a.kind.value for a in by_episode.get(e.id, [])}
        assert {"video", "telemetry", "manifest"} <= kinds, (e.uid, kinds)
    for a in artifacts:
        store.verify(a.sha256)
        assert store.size(a.sha256) == a.size_bytes


def reported_uids(site: Site) -> list[str]:
    return [r["uid"] for st in site.stations for r in st.records("episode")]


# -- the acceptance run ---------------------------------------------------------------------


def test_three_stations_with_only_a_url_and_a_token_run_a_campaign(site: Site) -> None:
    stations = [site.station(f"cell-{i}") for i in range(3)]
    for st in stations:
        st.start()
    for st in stations:
        wait_for(f"{st.name} opens", st.opened, 120)
        env = st.environ()
        leaked = sorted(k for k in env if SERVER_SECRET_NAMES.match(k))
        assert not leaked, f"{st.name}'s environment holds {leaked}"
        assert env["PROCTOR_STATION_TOKEN"] == st.token
        config = st.config.read_text()
        assert not SERVER_SECRETS_IN_TEXT.findall(config), config
        assert st.token not in config and site.server.origin in config
    for st in stations:
        st.wait()
    assert_campaign_ran_once(site, reported_uids(site))
    assert all(st.records("episode") for st in stations), "a station ran nothing"


# -- faults ----------------------------------------------------------------------------------


def _running_episode(site: Site) -> bool:
    with site.db() as s:
        return bool(
            s.scalar(
                sa.select(sa.func.count(Episode.id)).where(
                    Episode.campaign_id == site.campaign, Episode.state == EpisodeState.running
                )
            )
        )


def test_the_server_stopped_mid_episode_loses_and_repeats_nothing(site: Site) -> None:
    stations = [site.station(f"cell-{i}") for i in range(3)]
    for st in stations:
        st.start()
    wait_for("an episode is running on the server's record", lambda: _running_episode(site))
    site.server.stop()
    # the stations go on offline: the episode in hand finishes, no run is claimed
    time.sleep(3.0)
    site.server.start()  # the same port: the stations find it again
    for st in stations:
        st.wait()
    assert_campaign_ran_once(site, reported_uids(site))


def _an_upload_in_flight(site: Site) -> str | None:
    """An upload with a part in the store and another part arriving now (so
    that it cannot complete before the kill lands)."""
    proxy = site.proxy
    with proxy._lock:
        done = {p.upload_id for p in proxy.parts if p.status == 200}
        return next((u for u in done if proxy.receiving[u] > 0 and u not in proxy.completed), None)


def test_a_station_killed_mid_upload_resumes_it(site: Site) -> None:
    # larger frames and a slow store: an episode's recording takes seconds to send
    st = site.station("cell-slow", camera=(320, 240, 15))
    site.proxy.rate_bps = 96 * 1024
    st.start()
    upload = wait_for("a part of an upload reaches the store", lambda: _an_upload_in_flight(site))
    st.kill()
    killed_at = time.time()
    before = site.proxy.parts_of(upload, before=killed_at)
    assert before, "no part was received before the station was killed"
    assert upload not in site.proxy.completed
    site.proxy.rate_bps = 0.0
    st.start()  # the same host again: its ledger and spool are where it left them
    st.wait()
    # the same upload was completed, and the parts the store had were not sent again
    assert upload in site.proxy.completed
    after = {
        p.number
        for p in site.proxy.parts
        if p.upload_id == upload and p.at >= killed_at and p.status == 200
    }
    assert not (before & after), f"parts {sorted(before & after)} were sent twice"
    assert_campaign_ran_once(site, reported_uids(site))


# -- faults on the wire, spoken by the test as a station host ------------------------------


@dataclass
class Wire:
    """A station host's side of the station API in raw HTTP."""

    origin: str
    name: str
    token: str = field(repr=False)

    def call(self, method: str, path: str, body: Any = None, key: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        if key:
            headers[wire.IDEMPOTENCY_HEADER] = key
        content = body.model_dump_json() if body is not None else None
        return httpx.request(
            method,
            self.origin + wire.API_PREFIX + path,
            content=content,
            headers=headers,
            timeout=60,
        )

    def hello(self) -> httpx.Response:
        body = wire.Hello(
            station=self.name,
            profile="sim",
            layout_hash=hashlib.sha256(b"cell").hexdigest(),
            software_version="test",
            station_time=datetime.now(UTC),
        )
        return self.call("POST", "/hello", body)

    def claim(self, campaign: int, n: int = 1) -> wire.WorkWire:
        r = self.call("POST", "/claims", wire.ClaimRequest(campaign=campaign), f"claim:{n}")
        assert r.status_code == 200, r.text
        work = wire.ClaimReply.model_validate(r.json()).work
        assert work is not None
        return work

    def episode(self, work: wire.WorkWire, uid: str, rev: int, state: str) -> httpx.Response:
        body = wire.EpisodeWire(
            uid=uid,
            rev=rev,
            run_code=work.run_code,
            object=work.object,
            items=work.items,
            budget_s=work.items * work.per_item_cap_s,
            tote_side=work.tote_side,
            camera_side=work.camera_side,
            sim_seed=work.sim_seed,
            state=state,  # type: ignore[arg-type]
        )
        return self.call("PUT", f"/episodes/{uid}", body, f"episode:{uid}:{rev}")

    def gateway(self, work: wire.WorkWire) -> int:
        """The HTTP status of the gateway's answer to this station's handshake."""
        from websockets.exceptions import InvalidStatus
        from websockets.sync.client import connect

        assert work.gateway_path
        url = "ws" + self.origin.removeprefix("http") + work.gateway_path
        try:
            with connect(
                url, additional_headers={"Authorization": f"Bearer {self.token}"}, open_timeout=30
            ):
                return 101
        except InvalidStatus as exc:
            return int(exc.response.status_code)


def _wire_station(site: Site, name: str) -> Wire:
    w = Wire(site.server.origin, name, site.enrol(name))
    assert w.hello().status_code == 200
    return w


def _assignment(site: Site, run_code: str) -> Assignment:
    with site.db() as s:
        a = s.scalar(sa.select(Assignment).where(Assignment.run_code == run_code))
        assert a is not None
        s.expunge(a)
        return a


def test_a_revoked_station_is_refused_and_its_claim_returns_after_the_lease(site: Site) -> None:
    a, early, late = (_wire_station(site, n) for n in ("cell-a", "cell-b", "cell-c"))
    held = a.claim(site.campaign)
    assert a.gateway(held) == 101  # the handle works while the token does
    with site.db() as s:
        station_credentials.revoke(s, name="cell-a", actor=Actor(label="test-admin"))
    assert a.hello().status_code == 401
    assert (
        a.call("POST", "/claims", wire.ClaimRequest(campaign=site.campaign), "x").status_code == 401
    )
    assert a.gateway(held) == 403
    revoked_at = time.monotonic()
    # within the lease the run stays where it is: another station gets another run
    other = early.claim(site.campaign)
    assert other.run_code != held.run_code
    assert time.monotonic() - revoked_at < LEASE_S, "too slow to test within the lease"
    time.sleep(max(0.0, LEASE_S + 1.0 - (time.monotonic() - revoked_at)))

    holder = _assignment(site, held.run_code).station_id

    def released() -> bool:
        """No longer the revoked station's claim (pending, or claimed by the
        station whose claim set off the release, in the same call)."""
        slot = _assignment(site, held.run_code)
        return slot.status != AssignmentStatus.claimed or slot.station_id != holder

    def back_to_the_scheduler() -> set[str]:
        """The run, or the fresh slot that replaces it."""
        with site.db() as s:
            slot = s.scalar(sa.select(Assignment.id).where(Assignment.run_code == held.run_code))
            fresh = s.scalar(sa.select(Assignment.run_code).where(Assignment.replaces_id == slot))
        return {held.run_code, *([fresh] if fresh else [])}

    # the server may release it on its own (a sweep) or when a station next claims
    with contextlib.suppress(pytest.fail.Exception):
        wait_for("a sweep releases the run", released, 10)
    got = late.claim(site.campaign)
    wait_for("the revoked station's run is released", released, 60)
    if got.run_code not in back_to_the_scheduler():
        # released after ``late`` claimed: the next station to ask gets it
        got = _wire_station(site, "cell-d").claim(site.campaign)
    assert got.run_code in back_to_the_scheduler()


def test_a_station_presenting_another_stations_run_or_handle_is_refused(site: Site) -> None:
    a, b = _wire_station(site, "cell-a"), _wire_station(site, "cell-b")
    run_a, run_b = a.claim(site.campaign), b.claim(site.campaign)
    refused = {403, 404}
    # B abandons A's run, reports an episode under it, uses A's handle
    r = b.call("POST", f"/claims/{run_a.run_code}/abandon", wire.AbandonRequest(reason="x"), "ab")
    assert r.status_code in refused, r.text
    assert b.episode(run_a, secrets.token_hex(8), 1, "armed").status_code in refused
    assert b.gateway(run_a) == 403
    # nothing changed: A still holds its run, no episode exists under it, and A's own work
    assert _assignment(site, run_a.run_code).status == AssignmentStatus.claimed
    with site.db() as s:
        assert not s.scalar(
            sa.select(sa.func.count(Episode.id)).where(Episode.run_code == run_a.run_code)
        )
    assert a.gateway(run_a) == 101 and b.gateway(run_b) == 101
    assert a.episode(run_a, secrets.token_hex(8), 1, "armed").status_code == 200


def _upload(
    w: Wire, request: wire.UploadRequest, data: bytes
) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """Begin, send every part, complete: (the plan's JSON, its key, the
    completion's JSON)."""
    r = w.call("POST", "/uploads", request, "upload:one")
    assert r.status_code == 200, r.text
    first_plan = r.json()
    plan = wire.UploadPlan.model_validate(first_plan)
    assert len(plan.parts) >= 2  # a multipart upload
    done = []
    for part in plan.parts:
        start = (part.number - 1) * plan.part_size
        headers = dict(part.headers)
        if part.auth == "server":
            headers["Authorization"] = f"Bearer {w.token}"
        put = httpx.put(part.url, content=data[start : start + plan.part_size], headers=headers)
        assert put.status_code == 200, put.text
        done.append(wire.PartDone(number=part.number, etag=put.headers.get("ETag", "")))
    body = wire.CompleteRequest(parts=done)
    r = w.call("POST", f"/uploads/{plan.upload_id}/complete", body, "complete:one")
    assert r.status_code == 200, r.text
    return first_plan, plan.upload_id, r.json()


def test_a_replayed_upload_is_idempotent(site: Site) -> None:
    w = _wire_station(site, "cell-a")
    work = w.claim(site.campaign)
    uid = secrets.token_hex(8)
    assert w.episode(work, uid, 1, "armed").status_code == 200
    data = os.urandom(3 * PART_BYTES + 1000)
    sha = hashlib.sha256(data).hexdigest()
    request = wire.UploadRequest(
        episode_uid=uid, sha256=sha, size_bytes=len(data), kind="telemetry"
    )
    plan, upload_id, completed = _upload(w, request, data)
    first = wire.CompleteReply.model_validate(completed)
    assert first.registered and first.sha256 == sha and first.size_bytes == len(data)
    # the same calls again (a station that never saw the answers, whatever keys
    # it sends): begin says the artifact is there and there is nothing to send,
    # complete answers as the first time, and nothing is done twice
    for key in ("upload:one", "upload:two"):
        r = w.call("POST", "/uploads", request, key)
        assert r.status_code == 200, r.text
        replay = wire.UploadPlan.model_validate(r.json())
        assert replay.complete and not replay.parts
    assert plan["parts"] and not plan["complete"]
    parts = [wire.PartDone(number=p["number"], etag="") for p in plan["parts"]]
    body = wire.CompleteRequest(parts=parts)
    again = w.call("POST", f"/uploads/{upload_id}/complete", body, "complete:one")
    assert again.status_code == 200 and again.json() == completed
    with site.db() as s:
        rows = list(s.scalars(sa.select(Artifact).where(Artifact.sha256 == sha)))
    assert len(rows) == 1 and rows[0].size_bytes == len(data)
    site.store().verify(sha)
