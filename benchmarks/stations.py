"""Stations anywhere: what the station API costs a station, and what presigned
uploads cost a recording (``proctor/station/README.md``, Stations anywhere,
has the table it feeds).

    ./run bench stations [--stations 1,8,32] [--claims 40] [--baseline-claims 100]
                         [--upload-mib 256] [--part-mib 8] [--pg-url URL] [--plot PATH]
                         [--skip-upload] [--quick]

1. **Claim-to-armed latency** — the real web app served by uvicorn on
   loopback over a fresh PostgreSQL database, a running campaign, and N
   simulated stations (1, 8 and 32 threads, each its own enrolled station
   with its own token and connection). Each says ``hello`` once, then loops:
   ``POST /claims`` (a fresh Idempotency-Key each) → the ``WorkWire`` →
   ``PUT /episodes/{uid}`` in state ``armed`` acknowledged (claim-to-armed:
   from sending the claim to that answer) → the episode reported
   ``interrupted``, which settles the run in the same call and requeues it
   as a fresh slot (so the campaign never runs dry; its latency is printed
   too). p50/p99 per N and the claims a second. Baseline, in this process,
   on the same database just before each N: ``claims.claim_next`` and its
   commit, then the claim released (one station, no HTTP): the ratio is
   what the station API's round trips, authentication, idempotency and the
   armed episode's write add to a claim.
2. **Presigned upload throughput** — an S3 API on loopback (moto's server
   mode), the server's artifact store in it (the store's credentials in this
   process, as on the server; the station side uses none), the server's
   ``scheduler.upload_part_bytes`` set to ``--part-mib`` (8 MiB, the
   default). One station uploads a ``--upload-mib`` file as its forwarder
   does: ``POST /uploads`` → ``send_parts`` (the parts one at a time to the
   presigned URLs) → ``POST /uploads/{id}/complete``, where the server reads
   the object back once to check size and sha256 before registering it.
   Baseline, same bytes, same bucket, same process: boto3's ``upload_file``
   with the store's keys, the same part size, one part at a time. The ratio
   is presigned ÷ direct MiB/s, over the whole upload and over the parts.

The station side is the station host's own client
(``proctor.station.uplink.client.StationApiClient``, ``upload.send_parts``):
the figures include its overhead (request building, reply validation). The
plot (``--plot``) shows the latency CDFs per N and the two throughputs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import secrets
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
OBJECT = "spoons"
ARMS = ("reference", "swift", "steady")
LAYOUT_HASH = hashlib.sha256(b"bench-cell").hexdigest()
BUCKET = "proctor-bench"
MIB = 1 << 20


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


# -- the server ------------------------------------------------------------------------


@contextmanager
def fresh_postgres(admin_url: str) -> Iterator[str]:
    """A migrated PostgreSQL database of its own, dropped afterwards."""
    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    from proctor.core.db import migrate
    from proctor.core.db.engine import make_engine

    name = f"proctor_bench_stations_{uuid.uuid4().hex[:8]}"
    admin = make_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        migrate.upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def served(
    url: str, data_dir: Path, artifacts: str | None = None, **overrides: Any
) -> Iterator[Any]:
    """The real app on a loopback port (uvicorn in a thread); yields the app."""
    from proctor.core.settings import load_settings
    from proctor.demo.servers import WebServer, free_port
    from proctor.web.app import create_app

    options: dict[str, Any] = {"artifacts": artifacts, **overrides} if artifacts else overrides
    settings = load_settings(
        env="test",
        data_dir=data_dir,
        database_url=url,
        secret_key="bench-" + "x" * 40,
        **options,
    )
    app = create_app(settings)
    web = WebServer(app, host="127.0.0.1", port=free_port()).start()
    app.state.bench_origin = web.origin
    try:
        yield app
    finally:
        web.stop()


def seed_campaign(url: str, *, slots: int) -> int:
    """A running campaign of three arms on one object with at least ``slots``
    slots; the endpoints are never connected to (claims only name a handle)."""
    import sqlalchemy as sa

    from proctor.core.db.engine import make_engine, make_session_factory, session_scope
    from proctor.core.db.models import ObjectType, Policy, Submission, User
    from proctor.core.domain import ConformanceStatus, EndpointDialect, PolicyKind, SubmissionKind
    from proctor.scheduler import service
    from proctor.scheduler.protocol import parse_protocol
    from proctor.scheduler.service import Actor

    tag = secrets.token_hex(3)
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            if s.scalar(sa.select(ObjectType.id).where(ObjectType.name == OBJECT)) is None:
                s.add(ObjectType(name=OBJECT, prompt="put the spoons into the target bin"))
            for arm in ARMS:
                owner = User(username=f"lab-{arm}-{tag}")
                s.add(owner)
                s.flush()
                kind = PolicyKind.reference if arm == "reference" else PolicyKind.policy
                policy = Policy(name=f"{arm}-{tag}", kind=kind, owner_id=owner.id)
                s.add(policy)
                s.flush()
                s.add(
                    Submission(
                        policy_id=policy.id,
                        kind=SubmissionKind.endpoint,
                        endpoint_url="ws://127.0.0.1:9",
                        endpoint_dialect=EndpointDialect.openpi,
                        conformance_status=ConformanceStatus.passed,
                    )
                )
            s.flush()
            protocol = {
                "name": f"bench-{tag}",
                "items_per_episode": 1,
                "per_item_cap_s": 20,
                "tau_s": 40,
                "episodes_per_cell": max(2, -(-slots // len(ARMS))),
                "reference": f"reference-{tag}",
                "policies": [f"{a}-{tag}" for a in ARMS if a != "reference"],
                "objects": [OBJECT],
                "spatial_configs": [{"tote": "left", "camera": "left"}],
            }
            c = service.create_campaign(
                s, protocol=parse_protocol(protocol), actor=Actor(label="bench")
            )
            service.start_campaign(s, campaign=c.id, actor=Actor(label="bench"))
            return int(c.id)
    finally:
        engine.dispose()


def enrol_stations(url: str, n: int, prefix: str) -> list[tuple[str, str]]:
    """``n`` enrolled stations: (name, token)."""
    from proctor.core import station_credentials
    from proctor.core.audit import Actor
    from proctor.core.db.engine import make_engine, make_session_factory, session_scope

    engine = make_engine(url)
    out = []
    try:
        with session_scope(make_session_factory(engine)) as s:
            for i in range(n):
                name = f"{prefix}-{i:02d}"
                issued = station_credentials.enrol(
                    s, name=name, profile="sim", actor=Actor(label="bench")
                )
                out.append((name, issued.token))
    finally:
        engine.dispose()
    return out


# -- a simulated station: the station host's own client ------------------------------------


@dataclass
class BenchStation:
    """One station host's side of the station API: the real
    ``StationApiClient`` (its own HTTP connection), nothing else."""

    origin: str
    name: str
    token: str = field(repr=False)
    calls: int = 0

    def __post_init__(self) -> None:
        from proctor.station.uplink.client import StationApiClient

        self.api = StationApiClient(self.origin, self.token, timeout_s=120)

    def hello(self) -> Any:
        from proctor.core.station_api_wire import Hello

        return self.api.hello(
            Hello(
                station=self.name,
                profile="sim",
                layout_hash=LAYOUT_HASH,
                software_version="bench",
                station_time=datetime.now(UTC),
            )
        )

    def claim(self, campaign: int) -> Any:
        # a fresh key a claim: the same key would be answered from the server's memory
        self.calls += 1
        return self.api.claim(campaign, key=f"claim:{campaign}:{self.name}:{self.calls}")

    def put_episode(self, episode: Any) -> Any:
        return self.api.put_episode(episode)

    def close(self) -> None:
        self.api.close()


def episode_of(work: Any, uid: str, rev: int, state: str, **extra: Any) -> Any:
    from proctor.core.station_api_wire import EpisodeWire

    return EpisodeWire(
        uid=uid,
        rev=rev,
        run_code=work.run_code,
        object=work.object,
        items=work.items,
        budget_s=work.items * work.per_item_cap_s,
        tote_side=work.tote_side,
        camera_side=work.camera_side,
        sim_seed=work.sim_seed,
        state=state,
        **extra,
    )


def station_loop(
    station: BenchStation,
    campaign: int,
    claims: int,
    out: list[float],
    settle: list[float],
    tick: Any,
) -> None:
    """hello once, then ``claims`` times: claim → armed acknowledged → interrupted
    (settled in the same call: the server requeues the slot as a fresh one)."""
    station.hello()
    for _ in range(claims):
        t0 = time.perf_counter()
        reply = station.claim(campaign)
        if reply.work is None:
            raise RuntimeError(f"{station.name}: no work ({reply.reason})")
        uid = secrets.token_hex(8)
        station.put_episode(episode_of(reply.work, uid, 1, "armed"))
        t1 = time.perf_counter()
        out.append((t1 - t0) * 1000.0)
        ended = station.put_episode(
            episode_of(
                reply.work, uid, 2, "interrupted", outcome="system", outcome_reason="benchmark"
            )
        )
        settle.append((time.perf_counter() - t1) * 1000.0)
        if not ended.settled:
            raise RuntimeError(f"{station.name}: run {reply.work.run_code} not settled")
        tick()


def claim_latency(
    app: Any, url: str, campaign: int, n: int, claims: int
) -> tuple[list[float], float, list[float]]:
    """Claim-to-armed latencies (ms) of ``n`` stations working at once, the
    seconds all their claims took (claim, armed, interrupted: 3 calls each),
    and the interrupted snapshots' latencies (ms)."""
    from rich.progress import Progress

    origin = app.state.bench_origin
    stations = [
        BenchStation(origin, name, token) for name, token in enrol_stations(url, n, f"s{n}")
    ]
    results: list[list[float]] = [[] for _ in stations]
    settles: list[float] = []
    errors: list[BaseException] = []
    with Progress(transient=True) as progress:
        task = progress.add_task(f"{n} station(s) claiming", total=n * claims)

        def run(i: int) -> None:
            try:
                station_loop(
                    stations[i],
                    campaign,
                    claims,
                    results[i],
                    settles,
                    lambda: progress.advance(task),
                )
            except BaseException as exc:  # reported below, with the others
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
    for s in stations:
        s.close()
    if errors:
        raise errors[0]
    return [x for r in results for x in r], elapsed, settles


def direct_claim_latency(url: str, campaign: int, claims: int) -> list[float]:
    """The baseline: ``claim_next`` and its commit in this process, then the
    claim released so that the next one is the same work."""
    import sqlalchemy as sa

    from proctor.core.db.engine import make_engine, make_session_factory
    from proctor.core.db.models import Station
    from proctor.scheduler import claims as claims_mod

    [(name, _)] = enrol_stations(url, 1, f"direct-{secrets.token_hex(3)}")
    engine = make_engine(url)
    factory = make_session_factory(engine)
    out: list[float] = []
    try:
        with factory() as s:
            station_id = s.scalar(sa.select(Station.id).where(Station.name == name))
        for _ in range(claims):
            with factory() as s:
                t0 = time.perf_counter()
                claim = claims_mod.claim_next(s, campaign_id=campaign, station_id=station_id)
                s.commit()
                out.append((time.perf_counter() - t0) * 1000.0)
                assert claim is not None
                claims_mod.release_claim(s, run_code=claim.run_code, station_id=station_id)
                s.commit()
    finally:
        engine.dispose()
    return out


# -- presigned uploads ---------------------------------------------------------------------


@contextmanager
def moto_s3() -> Iterator[str]:
    """moto's S3 server on loopback with the bucket; yields its endpoint."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, **_store_keys()).create_bucket(Bucket=BUCKET)
    try:
        yield endpoint
    finally:
        server.stop()


def _store_keys() -> dict[str, str]:
    return {
        "region_name": "us-east-1",
        "aws_access_key_id": "bench",
        "aws_secret_access_key": "bench",
    }


@dataclass
class UploadTimes:
    """Seconds a presigned upload took, by step."""

    begin: float
    parts: float
    complete: float

    @property
    def total(self) -> float:
        return self.begin + self.parts + self.complete


def presigned_upload(station: BenchStation, path: Path, uid: str) -> UploadTimes:
    """Upload ``path`` as a station does: the plan, the parts one at a time to
    the presigned URLs (``send_parts``), the completion (the server reads the
    object back once for its size and sha256 before registering it)."""
    from proctor.core.station_api_wire import UploadRequest
    from proctor.station.uplink.upload import send_parts

    sha = _sha256_of(path)
    size = path.stat().st_size
    t0 = time.perf_counter()
    plan = station.api.begin_upload(
        UploadRequest(episode_uid=uid, sha256=sha, size_bytes=size, kind="video")
    )
    t1 = time.perf_counter()
    if any(part.auth != "store" for part in plan.parts):
        raise RuntimeError("the plan sends parts through the server, not to presigned URLs")
    done = send_parts(station.api.http, plan, path, server_headers=station.api.server_headers)
    t2 = time.perf_counter()
    reply = station.api.complete_upload(plan.upload_id, done, key=f"complete:{uid}:{sha}")
    t3 = time.perf_counter()
    if not reply.registered or reply.sha256 != sha:
        raise RuntimeError(f"upload not registered: {reply}")
    return UploadTimes(begin=t1 - t0, parts=t2 - t1, complete=t3 - t2)


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(MIB):
            digest.update(chunk)
    return digest.hexdigest()


def direct_upload(endpoint: str, path: Path, part_bytes: int) -> float:
    """The baseline: boto3's ``upload_file`` with the store's keys, the same
    part size, one part at a time (as the station sends them)."""
    import boto3
    from boto3.s3.transfer import TransferConfig

    client = boto3.client("s3", endpoint_url=endpoint, **_store_keys())
    config = TransferConfig(
        multipart_threshold=part_bytes, multipart_chunksize=part_bytes, max_concurrency=1,
        use_threads=False,
    )  # fmt: skip
    t0 = time.perf_counter()
    client.upload_file(str(path), BUCKET, f"direct/{uuid.uuid4().hex}", Config=config)
    return time.perf_counter() - t0


def upload_throughput(
    url: str, tmp: Path, args: argparse.Namespace
) -> tuple[float, float, UploadTimes]:
    """(presigned, direct) MiB/s, and the presigned upload's steps."""
    path = tmp / "recording.bin"
    with path.open("wb") as f:
        for _ in range(args.upload_mib):
            f.write(os.urandom(MIB))
    part_bytes = int(args.part_mib * MIB)
    with moto_s3() as endpoint:
        # the server's store and its keys: this process is the server here
        os.environ.update(
            {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
             "AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1"}
        )  # fmt: skip
        campaign = seed_campaign(url, slots=3)
        with served(
            url,
            tmp / "served-s3",
            artifacts=f"s3://{BUCKET}/artifacts",
            scheduler={"upload_part_bytes": part_bytes},
        ) as app:
            [(name, token)] = enrol_stations(url, 1, "uploader")
            station = BenchStation(app.state.bench_origin, name, token)
            station.hello()
            work = station.claim(campaign).work
            uid = secrets.token_hex(8)
            station.put_episode(episode_of(work, uid, 1, "armed"))
            station.put_episode(episode_of(work, uid, 2, "running"))
            times = presigned_upload(station, path, uid)
            station.close()
        direct = direct_upload(endpoint, path, part_bytes)
    return args.upload_mib / times.total, args.upload_mib / direct, times


# -- report --------------------------------------------------------------------------------


def plot(path: Path, latencies: dict[int, list[float]], baseline: list[float], mibs: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for n, values in sorted(latencies.items()):
        xs = np.sort(values)
        ax1.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=f"{n} station(s)")
    xs = np.sort(baseline)
    ax1.plot(xs, np.arange(1, len(xs) + 1) / len(xs), "k--", label="claim_next (in process)")
    ax1.set(xscale="log", xlabel="ms", ylabel="fraction", title="claim-to-armed latency")
    ax1.legend()
    if mibs is not None:
        ax2.bar(["presigned", "direct (boto3)"], list(mibs), color=["tab:blue", "tab:gray"])
        ax2.set(ylabel="MiB/s", title="upload throughput, loopback S3 (moto)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"\nplot: {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stations", default="1,8,32", help="station counts, comma-separated")
    ap.add_argument("--claims", type=int, default=40, help="claims per station")
    ap.add_argument("--baseline-claims", type=int, default=100, help="baseline claims per N")
    ap.add_argument("--upload-mib", type=int, default=256)
    ap.add_argument("--part-mib", type=float, default=8, help="the server's upload part size")
    ap.add_argument("--pg-url", default=PG_ADMIN_URL, help="a PostgreSQL admin URL")
    ap.add_argument("--plot", type=Path, default=Path("proctor-data/bench/stations.png"))
    ap.add_argument("--skip-upload", action="store_true")
    ap.add_argument("--quick", action="store_true", help="1 and 2 stations, 16 MiB upload")
    args = ap.parse_args()
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    if args.quick:
        args.stations, args.claims, args.baseline_claims = "1,2", 5, 20
        args.upload_mib, args.part_mib = 16, 5
    counts = [int(x) for x in args.stations.split(",")]

    print(f"machine: {os.cpu_count()} cores, load average {_load()} at start")
    latencies: dict[int, list[float]] = {}
    baselines: dict[int, list[float]] = {}
    with fresh_postgres(args.pg_url) as url, tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        campaign = seed_campaign(url, slots=max(counts) * 2)
        print("\n== claim-to-armed (ms), the real app on PostgreSQL ==")
        print(
            "   N  claims   p50     p99   | baseline p50  p99  | ratio p50  p99 | claims/s"
            " | load 1/5/15 min"
        )
        with served(url, tmp / "served") as app:
            for n in counts:
                # the baseline just before, on the database as the stations find it
                base = direct_claim_latency(url, campaign, args.baseline_claims)
                values, elapsed, settles = claim_latency(app, url, campaign, n, args.claims)
                latencies[n], baselines[n] = values, base
                p50, p99, b50, b99 = pct(values, 50), pct(values, 99), pct(base, 50), pct(base, 99)
                print(
                    f"{n:4d}  {len(values):6d} {p50:7.1f} {p99:7.1f}  | {b50:9.2f} {b99:7.2f}"
                    f"  | {p50 / b50:7.1f}× {p99 / b99:5.1f}× | {len(values) / elapsed:8.1f}"
                    f" | {_load()}"
                )
                print(
                    "      the interrupted snapshot (settles and requeues the run): "
                    f"p50 {pct(settles, 50):.1f}  p99 {pct(settles, 99):.1f} ms"
                )
        mibs = None
        if not args.skip_upload:
            presigned, direct, times = upload_throughput(url, tmp, args)
            mibs = (presigned, direct)
            print(f"\n== upload of {args.upload_mib} MiB, {args.part_mib:g} MiB parts one at a "
                  "time, to moto (S3) on loopback ==")  # fmt: skip
            print(f"presigned, the station's client: {presigned:7.1f} MiB/s "
                  f"(plan {times.begin:.2f} s, parts {times.parts:.2f} s, "
                  f"completion with the server's sha256 check {times.complete:.2f} s)")  # fmt: skip
            print(f"direct boto3 upload_file (baseline): {direct:7.1f} MiB/s")
            print(f"ratio presigned / direct: {presigned / direct:.2f} "
                  f"(parts alone: {args.upload_mib / times.parts / direct:.2f})")  # fmt: skip
            print(f"load average at the end: {_load()}")
    plot(args.plot, latencies, baselines[counts[-1]], mibs)


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
