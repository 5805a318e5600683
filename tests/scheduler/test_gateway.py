"""The blinded policy gateway end to end: a real uvicorn server running the
gateway, a real policy server (websockets) upstream, a real client as the
station — on both databases."""

from __future__ import annotations

import hashlib
import logging
import random
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from proctor.core.db.models import Assignment, Submission
from proctor.core.domain import AssignmentStatus, EndpointDialect
from proctor.core.settings import load_settings
from proctor.policywire.client import PolicyClient, PolicyUnavailable
from proctor.policywire.serving.positronic import PositronicServer
from proctor.policywire.wire import keys
from proctor.scheduler import claims, service
from proctor.scheduler.codes import new_endpoint_handle
from proctor.scheduler.endpoint_keys import encrypt_api_key, generate_encryption_key
from proctor.scheduler.gateway import (
    CLOSE_UPSTREAM_LOST,
    CLOSE_UPSTREAM_UNAVAILABLE,
    GatewayConfig,
    gateway_router,
    gateway_url,
    station_headers,
    station_id_headers,
    to_station_code,
    to_upstream_code,
)
from proctor.scheduler.service import Actor
from tests.loopback import ScriptedResolver, TcpWitness, redirecting_server
from tests.scheduler import builders
from tests.scheduler.conftest import CommittedDb, Gateway, ServerThread, free_port
from tests.scheduler.policy_server import METADATA, PolicyServer

API_KEY = "sk-submitter-secret-42"


@dataclass
class Run:
    handle: str
    campaign_id: int
    station: int  # the claiming station's id
    token: str  # its credential
    secrets: list[str]  # everything the station must never see


def _claimed_run(
    gw: Gateway,
    upstream_url: str,
    *,
    api_key: str | None = API_KEY,
    dialect: EndpointDialect | None = None,
) -> Run:
    with gw.db.session() as s:
        w = builders.world(s, 1, objects=("spoons",))
        encrypted = encrypt_api_key(api_key, encryption_key=gw.encryption_key) if api_key else None
        for sub in w.submissions.values():
            sub.endpoint_url = upstream_url
            sub.endpoint_api_key_encrypted = encrypted
            if dialect is not None:
                sub.endpoint_dialect = dialect
        c = service.create_campaign(
            s, protocol=builders.protocol(w, episodes_per_cell=1), actor=Actor(label="t")
        )
        service.start_campaign(s, campaign=c.id, actor=Actor(label="t"))
        st, token = builders.enrolled_station(s)
        claim = claims.claim_next(s, campaign_id=c.id, station_id=st.id)
        hidden = [p.name for p in w.arms] + [o.username for o in w.owners.values()]
        return Run(claim.endpoint_handle, c.id, st.id, token, [*hidden, upstream_url, API_KEY])


def _connect(
    gw: Gateway, handle: str, token: str | None, *, headers: dict[str, str] | None = None
) -> ClientConnection:
    """The station's connection: it proves itself as the work source's Work does."""
    sent = station_headers(token) if token is not None else {}
    return connect(
        gateway_url(gw.base, handle),
        max_size=None,
        compression=None,
        proxy=None,
        open_timeout=10,
        additional_headers={**sent, **(headers or {})} or None,
    )


def _assert_blind(text: str, run: Run) -> None:
    leaked = [s for s in run.secrets if s and s in text]
    assert leaked == []


def test_frames_are_relayed_intact_both_ways(gateway: Gateway) -> None:
    with PolicyServer(API_KEY) as upstream:
        run = _claimed_run(gateway, upstream.url)
        with _connect(gateway, run.handle, run.token) as ws:
            _assert_blind(str(ws.response.headers) + str(ws.response.body), run)
            assert ws.recv(timeout=10) == METADATA  # the server's metadata, first
            payload = random.Random(7).randbytes(3_000_000)  # two camera images' worth
            ws.send(payload)
            reply = msgpack.unpackb(ws.recv(timeout=10))
            assert reply["sha256"] == hashlib.sha256(payload).hexdigest()
            assert len(reply["actions"]) == 10
            ws.send("reset")
            assert ws.recv(timeout=10) == "reset"
            ws.close(1000)
        assert upstream.closed.wait(10)
        assert upstream.seen.frames == [payload, "reset"]  # byte for byte, text as text
        assert upstream.seen.auth == [f"Api-Key {API_KEY}"]
        assert upstream.seen.close_codes == [1000]


def _positronic_observation(client: PolicyClient) -> dict[str, Any]:
    from tests.station.conftest import posed_observation

    assert client.info is not None
    return posed_observation(client.info, xyz=(0.45, 0.0, 0.35), prompt="put the spoons in the bin")


class _StepDown:
    """Answers every observation with a 2-step Cartesian chunk: 1 cm down, gripper closing."""

    def __init__(self) -> None:
        self.calls = 0

    def metadata(self) -> dict[str, Any]:
        return {}

    def new_session(self) -> _StepDown:
        return self

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        start = np.asarray(obs[keys.OBS_CARTESIAN_POSITION], dtype=np.float64)
        down = start + np.array([0, 0, -0.01, 0, 0, 0])
        return {keys.REPLY_ACTIONS: np.stack([np.r_[start, 0.0], np.r_[down, 1.0]])}


def test_a_positronic_session_is_relayed_with_the_bearer_key(gateway: Gateway) -> None:
    """The stored URL is the normalised session URL; the gateway sends the key as
    Positronic's client does (Bearer) and relays the status frames, the ready
    frame and the results untouched. The station connects to the gateway URL as is."""
    policy = _StepDown()
    with PositronicServer(policy, auth_token=API_KEY) as upstream:
        run = _claimed_run(gateway, upstream.session_url(), dialect=EndpointDialect.positronic_v1)
        client = PolicyClient(
            gateway_url(gateway.base, run.handle),
            dialect=EndpointDialect.positronic_v1,
            headers=station_headers(run.token),
        )
        try:
            info = client.connect()
            assert info.dialect == EndpointDialect.positronic_v1
            reply = client.infer(_positronic_observation(client), timeout_s=10)
        finally:
            client.close()
        assert policy.calls == 1 and reply.actions.shape == (2, 7)
        np.testing.assert_allclose(
            reply.actions[:, :3], [[0.45, 0, 0.35], [0.45, 0, 0.34]], atol=1e-6
        )
        np.testing.assert_allclose(reply.actions[:, 6], [0, 1])
        assert upstream.sessions == 1 and upstream.last_model == "demo"

        # the same server registered as openpi would be sent 'Api-Key …': refused upstream
        other = _claimed_run(gateway, upstream.session_url(), dialect=EndpointDialect.openpi)
        client = PolicyClient(
            gateway_url(gateway.base, other.handle),
            dialect=EndpointDialect.positronic_v1,
            headers=station_headers(other.token),
            connect_timeout_s=5.0,
        )
        with pytest.raises(PolicyUnavailable):
            client.connect()
        client.close()
        assert upstream.sessions == 1


def test_a_handle_may_be_used_again_while_its_run_is_claimed(gateway: Gateway) -> None:
    """The station's pre-flight connects, reads the metadata and leaves; the
    episode then connects again with the same handle."""
    with PolicyServer(API_KEY) as upstream:
        run = _claimed_run(gateway, upstream.url)
        for _ in range(2):
            with _connect(gateway, run.handle, run.token) as ws:
                assert ws.recv(timeout=10) == METADATA


def test_refused_handles_all_look_the_same_and_leak_nothing(gateway: Gateway) -> None:
    with PolicyServer(API_KEY) as upstream:
        run = _claimed_run(gateway, upstream.url)
        with gateway.db.session() as s:
            pending = s.scalars(
                sa.select(Assignment.endpoint_handle).where(
                    Assignment.campaign_id == run.campaign_id,
                    Assignment.status == AssignmentStatus.pending,
                )
            ).first()
            finished = s.scalars(
                sa.select(Assignment).where(Assignment.endpoint_handle == run.handle)
            ).one()
        handles = {
            "unknown": new_endpoint_handle(),
            "malformed": "not-a-handle",
            "pending (not claimed)": pending,
        }
        answers = {}
        for label, handle in handles.items():
            with pytest.raises(InvalidStatus) as exc:
                _connect(gateway, handle, run.token)
            response = exc.value.response
            answers[label] = (response.status_code, bytes(response.body or b""))
            _assert_blind(str(response.headers) + repr(response.body), run)
        assert set(answers.values()) == {answers["unknown"]}
        assert answers["unknown"][0] == 403

        # the claimed handle works, until its run is finished or its campaign closes
        with _connect(gateway, run.handle, run.token) as ws:
            assert ws.recv(timeout=10) == METADATA
        with gateway.db.session() as s:
            a = s.get(Assignment, finished.id)
            a.status = AssignmentStatus.done
        with pytest.raises(InvalidStatus) as exc:
            _connect(gateway, run.handle, run.token)
        assert (exc.value.response.status_code, bytes(exc.value.response.body or b"")) == answers[
            "unknown"
        ]
        assert upstream.seen.auth == [f"Api-Key {API_KEY}"]  # refused ones never went upstream


def test_closed_campaign_handles_are_refused(gateway: Gateway) -> None:
    with PolicyServer() as upstream:
        run = _claimed_run(gateway, upstream.url, api_key=None)
        with _connect(gateway, run.handle, run.token) as ws:
            assert ws.recv(timeout=10) == METADATA
        assert upstream.seen.auth == [None]  # no key registered, no header sent
        with gateway.db.session() as s:
            service.close_campaign(s, campaign=run.campaign_id, actor=Actor(label="t"))
        with pytest.raises(InvalidStatus) as exc:
            _connect(gateway, run.handle, run.token)
        assert exc.value.response.status_code == 403


def test_policy_down_closes_with_1013(gateway: Gateway) -> None:
    run = _claimed_run(gateway, f"ws://127.0.0.1:{free_port()}")  # nothing listens there
    with _connect(gateway, run.handle, run.token) as ws, pytest.raises(ConnectionClosed) as exc:
        ws.recv(timeout=10)
    assert exc.value.rcvd is not None
    assert exc.value.rcvd.code == CLOSE_UPSTREAM_UNAVAILABLE
    _assert_blind(exc.value.rcvd.reason, run)


def test_policy_vanishing_mid_episode_closes_with_1014(gateway: Gateway) -> None:
    with PolicyServer(API_KEY) as upstream:
        run = _claimed_run(gateway, upstream.url)
        with _connect(gateway, run.handle, run.token) as ws:
            assert ws.recv(timeout=10) == METADATA
            ws.send("abort")
            with pytest.raises(ConnectionClosed) as exc:
                ws.recv(timeout=10)
        assert exc.value.rcvd is not None and exc.value.rcvd.code == CLOSE_UPSTREAM_LOST


def test_policy_close_codes_pass_through_without_their_reason(gateway: Gateway) -> None:
    with PolicyServer(API_KEY) as upstream:
        run = _claimed_run(gateway, upstream.url)
        secret_reason = f"{run.secrets[0]} ran out of GPU memory"
        with _connect(gateway, run.handle, run.token) as ws:
            assert ws.recv(timeout=10) == METADATA
            ws.send(f"close 4001 {secret_reason}")
            with pytest.raises(ConnectionClosed) as exc:
                ws.recv(timeout=10)
        assert exc.value.rcvd is not None and exc.value.rcvd.code == 4001
        assert exc.value.rcvd.reason == ""

        with _connect(gateway, run.handle, run.token) as ws:
            ws.recv(timeout=10)
            ws.send("close 1000 done")
            with pytest.raises(ConnectionClosedOK):
                ws.recv(timeout=10)


def test_rotated_encryption_key_refuses_the_handle(gateway: Gateway) -> None:
    with PolicyServer(API_KEY) as upstream:
        run = _claimed_run(gateway, upstream.url)
        with gateway.db.session() as s:
            sub_id = s.scalars(
                sa.select(Assignment.submission_id).where(Assignment.endpoint_handle == run.handle)
            ).one()
            s.get(Submission, sub_id).endpoint_api_key_encrypted = b"garbage-not-fernet"
        with pytest.raises(InvalidStatus) as exc:
            _connect(gateway, run.handle, run.token)
        assert exc.value.response.status_code == 403
        assert upstream.seen.auth == []


def test_close_code_mapping() -> None:
    assert to_station_code(None) == to_station_code(1006) == CLOSE_UPSTREAM_LOST
    assert to_station_code(1000) == 1000 and to_station_code(4001) == 4001
    assert to_station_code(2000) == CLOSE_UPSTREAM_LOST
    assert to_upstream_code(1006) == to_upstream_code(None) == 1001
    assert to_upstream_code(1000) == 1000
    assert gateway_url("http://host:8000/", "abc") == "ws://host:8000/policy/abc"
    assert gateway_url("https://host", "abc") == "wss://host/policy/abc"


def test_a_station_vanishing_closes_the_policy_connection(gateway: Gateway) -> None:
    with PolicyServer(API_KEY) as upstream:
        run = _claimed_run(gateway, upstream.url)
        with _connect(gateway, run.handle, run.token) as ws:
            assert ws.recv(timeout=10) == METADATA
            ws.socket.shutdown(socket.SHUT_RDWR)  # no close frame: the station crashed
            ws.socket.close()
            assert upstream.closed.wait(10)
        assert upstream.seen.close_codes == [1001]  # going away


# -- where the gateway connects (proctor/core/netguard.py) -----------------------------------------
@pytest.fixture(scope="module")
def strict_gateway(committed_db: CommittedDb) -> Iterator[Gateway]:
    """The gateway as a production site runs it: private endpoints not allowed.
    On asyncio's own event loop, whose name lookups go through
    ``socket.getaddrinfo``, so that a test's scripted resolver reaches any
    lookup the gateway makes (uvloop resolves in C)."""
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


def _closed_with(gw: Gateway, run: Run) -> int:
    with _connect(gw, run.handle, run.token) as ws, pytest.raises(ConnectionClosed) as exc:
        ws.recv(timeout=10)
    assert exc.value.rcvd is not None
    return exc.value.rcvd.code


def test_a_redirecting_policy_server_is_not_followed(gateway: Gateway) -> None:
    with TcpWitness() as target, redirecting_server(f"ws://127.0.0.1:{target.port}/") as url:
        run = _claimed_run(gateway, url)
        assert _closed_with(gateway, run) == CLOSE_UPSTREAM_UNAVAILABLE
    assert target.connections == 0


def test_a_name_rebound_to_loopback_since_registration_is_refused(
    strict_gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registered while the name resolved to a public address; at evaluation
    time it resolves to loopback: the gateway judges it again and refuses."""
    from proctor.web.submissions import endpoints

    with PolicyServer(API_KEY) as upstream:
        url = f"ws://policy.rebind.test:{upstream.port}"
        resolver = ScriptedResolver("policy.rebind.test", ["8.8.8.8", "127.0.0.1"])
        resolver.install(monkeypatch)
        strict = load_settings(env="prod", secret_key="k" * 40)
        endpoints.check_reachable_publicly(url, strict)  # registration: public, accepted
        run = _claimed_run(strict_gateway, url)
        assert _closed_with(strict_gateway, run) == CLOSE_UPSTREAM_UNAVAILABLE
        assert resolver.calls >= 2
    assert upstream.seen.auth == []  # never connected


# -- the handle: one station, one connection, no logs ------------------------------------------
def test_a_handle_is_relayed_only_for_the_station_that_claimed_it(gateway: Gateway) -> None:
    with PolicyServer(API_KEY) as upstream:
        run = _claimed_run(gateway, upstream.url)
        refused: list[dict[str, str]] = [
            {},  # no proof at all
            # its own id, but an id is a claim, not a proof: not trusted by default
            station_id_headers(run.station),
            station_headers("pst_" + "x" * 43),  # a token nobody issued
            {"Authorization": run.token},  # the right token without its scheme
            {"Authorization": f"Api-Key {run.token}"},
        ]
        for headers in refused:
            with pytest.raises(InvalidStatus) as exc:
                _connect(gateway, run.handle, None, headers=headers)
            assert exc.value.response.status_code == 403, headers
        assert upstream.seen.auth == []
        with _connect(gateway, run.handle, run.token) as ws:
            assert ws.recv(timeout=10) == METADATA
        assert upstream.seen.auth == [f"Api-Key {API_KEY}"]


def test_a_handle_carries_one_connection_at_a_time(gateway: Gateway) -> None:
    with PolicyServer(API_KEY) as upstream:
        run = _claimed_run(gateway, upstream.url)
        with _connect(gateway, run.handle, run.token) as first:
            assert first.recv(timeout=10) == METADATA
            with pytest.raises(InvalidStatus) as exc:
                _connect(gateway, run.handle, run.token)
            assert exc.value.response.status_code == 403
            first.send("reset")
            assert first.recv(timeout=10) == "reset"  # the first is untouched
        assert len(upstream.seen.auth) == 1
        # closed: the handle may be used again (the station's pre-flight, then its episode)
        with _connect(gateway, run.handle, run.token) as again:
            assert again.recv(timeout=10) == METADATA


def test_handles_stay_out_of_the_server_log(gateway: Gateway) -> None:
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    loggers = [logging.getLogger(n) for n in ("uvicorn.error", "uvicorn.access")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.INFO)
        lg.addHandler(handler)
    unknown = new_endpoint_handle()
    try:
        with PolicyServer(API_KEY) as upstream:
            run = _claimed_run(gateway, upstream.url)
            with _connect(gateway, run.handle, run.token) as ws:
                assert ws.recv(timeout=10) == METADATA
            with pytest.raises(InvalidStatus):
                _connect(gateway, unknown, run.token)
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
    lines = [r.getMessage() for r in records]
    assert any("/policy/" in line and "[accepted]" in line for line in lines), lines
    assert any("/policy/" in line and "403" in line for line in lines), lines
    assert not [line for line in lines if run.handle in line or unknown in line]
