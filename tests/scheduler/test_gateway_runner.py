"""The gateway relaying to an uploaded checkpoint's runner server: a real
uvicorn gateway as a production site runs it (private endpoints refused), a
real policy server on loopback standing in for the runner's sandboxed
server, a real client as the station.

The ``RunnerServer`` row each test writes (status ``ready``, ``url``,
``dialect``) stands in for the runner host (``proctor/runner``, which has its
own tests): it is what a host writes once its server answers.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from proctor.core.db.models import Assignment, Policy, RunnerServer, Submission, User
from proctor.core.db.types import utcnow
from proctor.core.domain import (
    ConformanceStatus,
    RunnerFailure,
    RunnerStatus,
    SubmissionKind,
)
from proctor.scheduler import claims, service
from proctor.scheduler.endpoint_keys import generate_encryption_key
from proctor.scheduler.gateway import (
    CLOSE_UPSTREAM_LOST,
    CLOSE_UPSTREAM_UNAVAILABLE,
    GatewayConfig,
    gateway_router,
    gateway_url,
    station_headers,
)
from proctor.scheduler.service import Actor
from tests.scheduler import builders
from tests.scheduler.conftest import CommittedDb, Gateway, ServerThread
from tests.scheduler.policy_server import METADATA, PolicyServer

ADMIN = Actor(label="t")


@pytest.fixture(scope="module")
def strict_gateway(committed_db: CommittedDb) -> Iterator[Gateway]:
    """Private endpoints not allowed: a submitter's loopback endpoint is refused."""
    key = generate_encryption_key()
    app = FastAPI()
    app.include_router(
        gateway_router(
            GatewayConfig(
                session_factory=committed_db.factory,
                encryption_key=key,
                connect_timeout_s=2.0,
                allow_private_endpoints=False,
            )
        )
    )
    with ServerThread(app, loop="asyncio") as server:
        yield Gateway(f"ws://127.0.0.1:{server.port}", key, committed_db)


@dataclass
class Runs:
    checkpoint: tuple[str, str]  # the run's handle, the claiming station's token
    endpoint: tuple[str, str]
    runner_id: int
    secrets: list[str]


def _campaign(gw: Gateway, runner_url: str, endpoint_url: str) -> Runs:
    """A running campaign of a checkpoint (its runner ready at ``runner_url``)
    and a submitter's endpoint at ``endpoint_url``; one claimed run of each."""
    with gw.db.session() as s:
        w = builders.world(s, 1, objects=("spoons",))
        for sub in w.submissions.values():
            sub.endpoint_url = endpoint_url
        owner = User(username=f"ckpt-owner-{secrets.token_hex(3)}")
        s.add(owner)
        s.flush()
        policy = Policy(name=f"ckpt-{secrets.token_hex(3)}", owner_id=owner.id)
        s.add(policy)
        s.flush()
        ckpt = Submission(
            policy_id=policy.id,
            kind=SubmissionKind.checkpoint,
            checkpoint_sha256=secrets.token_hex(32),
            conformance_status=ConformanceStatus.passed,
        )
        s.add(ckpt)
        s.flush()
        proto = builders.protocol(
            w, policies=[w.policies[0].name, policy.name], episodes_per_cell=1
        )
        c = service.create_campaign(s, protocol=proto, actor=ADMIN)
        service.start_campaign(s, campaign=c.id, actor=ADMIN)
        # the runner host's part: its server answers on runner_url
        server = s.scalars(
            sa.select(RunnerServer).where(RunnerServer.submission_id == ckpt.id)
        ).one()
        server.status, server.url, server.dialect = RunnerStatus.ready, runner_url, "openpi"
        server.host, server.ready_at, server.stage = "inference-7.internal", utcnow(), "ready"
        server.heartbeat_at = utcnow()  # the host's heartbeat: a silent host is not relayed
        s.flush()
        handles: dict[int, tuple[str, str]] = {}
        while len(handles) < 2:
            # a station holding a claim gets that one back
            st, token = builders.enrolled_station(s)
            claim = claims.claim_next(s, campaign_id=c.id, station_id=st.id)
            assert claim is not None
            a = s.scalars(sa.select(Assignment).where(Assignment.run_code == claim.run_code)).one()
            if a.submission_id in (ckpt.id, w.submissions[w.policies[0].name].id):
                handles.setdefault(a.submission_id, (claim.endpoint_handle, token))
        hidden = [policy.name, owner.username, runner_url, "inference-7"]
        return Runs(
            handles[ckpt.id], handles[w.submissions[w.policies[0].name].id], server.id, hidden
        )


def _connect(gw: Gateway, handle: str, token: str) -> ClientConnection:
    return connect(
        gateway_url(gw.base, handle),
        max_size=None,
        compression=None,
        proxy=None,
        open_timeout=10,
        additional_headers=station_headers(token),
    )


def _closed_with(gw: Gateway, handle: str, token: str) -> tuple[int, str]:
    with _connect(gw, handle, token) as ws, pytest.raises(ConnectionClosed) as exc:
        ws.recv(timeout=10)
    assert exc.value.rcvd is not None
    return exc.value.rcvd.code, exc.value.rcvd.reason


def _last_used(gw: Gateway, runner_id: int):
    with gw.db.session() as s:
        return s.get(RunnerServer, runner_id).last_used_at


def test_a_checkpoint_is_relayed_to_its_runner_and_a_private_endpoint_is_not(
    strict_gateway: Gateway,
) -> None:
    """Both servers listen on loopback. The runner's URL was written by the
    platform's runner host: relayed. The submitter's endpoint URL is the
    submitter's: refused (1013), as on any production site."""
    with PolicyServer() as runner, PolicyServer() as endpoint:
        runs = _campaign(strict_gateway, runner.url, endpoint.url)
        assert _last_used(strict_gateway, runs.runner_id) is None
        with _connect(strict_gateway, *runs.checkpoint) as ws:
            text = str(ws.response.headers) + str(ws.response.body)
            assert [s for s in runs.secrets if s in text] == []
            assert ws.recv(timeout=10) == METADATA
            ws.send(b"\x01\x02")
            assert ws.recv(timeout=10)
            started = _last_used(strict_gateway, runs.runner_id)
            assert started is not None  # recorded when the relay started
            ws.close(1000)
        assert runner.closed.wait(10)
        deadline = time.monotonic() + 10
        while _last_used(strict_gateway, runs.runner_id) == started:
            assert time.monotonic() < deadline, "the relay's end was not recorded"
            time.sleep(0.05)
        assert runner.seen.frames == [b"\x01\x02"]

        code, _ = _closed_with(strict_gateway, *runs.endpoint)
        assert code == CLOSE_UPSTREAM_UNAVAILABLE
        assert endpoint.seen.auth == []  # never connected


def test_a_runner_not_ready_is_an_unavailable_policy(strict_gateway: Gateway) -> None:
    with PolicyServer() as runner, PolicyServer() as endpoint:
        runs = _campaign(strict_gateway, runner.url, endpoint.url)
        with strict_gateway.db.session() as s:
            server = s.get(RunnerServer, runs.runner_id)
            server.status, server.failure = RunnerStatus.failed, RunnerFailure.out_of_memory
            server.fault, server.finished_at = RunnerFailure.out_of_memory.fault, utcnow()
            server.message = "the server ran out of memory on inference-7"
        code, reason = _closed_with(strict_gateway, *runs.checkpoint)
        assert code == CLOSE_UPSTREAM_UNAVAILABLE
        assert reason == "policy unavailable"  # nothing of the runner or its failure
        assert runner.seen.auth == []


def test_a_runner_dropping_mid_episode_is_1014(strict_gateway: Gateway) -> None:
    with PolicyServer() as runner, PolicyServer() as endpoint:
        runs = _campaign(strict_gateway, runner.url, endpoint.url)
        with _connect(strict_gateway, *runs.checkpoint) as ws:
            assert ws.recv(timeout=10) == METADATA
            ws.send("abort")  # the server's connection drops without a close frame
            with pytest.raises(ConnectionClosed) as exc:
                ws.recv(timeout=10)
        assert exc.value.rcvd is not None and exc.value.rcvd.code == CLOSE_UPSTREAM_LOST
        assert [s for s in runs.secrets if s in exc.value.rcvd.reason] == []
