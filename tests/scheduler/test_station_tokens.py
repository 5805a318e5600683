"""Stations' credentials at the gateway: a handle is relayed only for the
station holding its claim, proven by that station's live token — with a real
uvicorn gateway, a real policy server and a real client, on both databases.
And the tokens' life: enrolment, rotation with a window, revocation, and
nothing but a hash at rest."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from proctor.core import station_credentials
from proctor.core.audit import Actor
from proctor.core.db.models import Assignment, Base, StationToken
from proctor.core.db.types import utcnow
from proctor.core.domain import AssignmentStatus
from proctor.core.errors import Conflict, NotFound, UsageError
from proctor.core.settings import Settings
from proctor.scheduler import claims, service
from proctor.scheduler.codes import new_endpoint_handle
from proctor.scheduler.gateway import (
    GatewayConfig,
    gateway_router,
    gateway_url,
    station_headers,
    station_id_headers,
)
from tests.scheduler import builders
from tests.scheduler.conftest import CommittedDb, Gateway, ServerThread
from tests.scheduler.policy_server import METADATA, PolicyServer

ADMIN = Actor(label="test-admin")


@dataclass
class Held:
    handle: str
    station_id: int
    station_name: str
    token: str


def _held_runs(gw: Gateway, upstream_url: str, n: int) -> list[Held]:
    """A running campaign; ``n`` enrolled stations holding one claim each."""
    with gw.db.session() as s:
        w = builders.world(s, 1, objects=("spoons",))
        for sub in w.submissions.values():
            sub.endpoint_url = upstream_url
        c = service.create_campaign(s, protocol=builders.protocol(w), actor=ADMIN)
        service.start_campaign(s, campaign=c.id, actor=ADMIN)
        held = []
        for _ in range(n):
            st, token = builders.enrolled_station(s)
            claim = claims.claim_next(s, campaign_id=c.id, station_id=st.id)
            assert claim is not None
            held.append(Held(claim.endpoint_handle, st.id, st.name, token))
        return held


def _connect(gw: Gateway, handle: str, headers: dict[str, str]) -> ClientConnection:
    return connect(
        gateway_url(gw.base, handle),
        proxy=None,
        open_timeout=10,
        additional_headers=headers or None,
    )


def _accepted(gw: Gateway, handle: str, headers: dict[str, str]) -> bool:
    try:
        with _connect(gw, handle, headers) as ws:
            assert ws.recv(timeout=10) == METADATA
            return True
    except InvalidStatus as exc:
        assert exc.response.status_code == 403
        return False


def _refusal(
    gw: Gateway, handle: str, headers: dict[str, str]
) -> tuple[int, tuple[tuple[str, str], ...], bytes]:
    """The whole answer to a refused handshake, less its date."""
    with pytest.raises(InvalidStatus) as exc:
        _connect(gw, handle, headers)
    r = exc.value.response
    kept = tuple(sorted((k.lower(), v) for k, v in r.headers.raw_items() if k.lower() != "date"))
    return r.status_code, kept, bytes(r.body or b"")


def test_a_station_presenting_another_stations_handle_is_refused(gateway: Gateway) -> None:
    with PolicyServer() as upstream:
        mine, theirs = _held_runs(gateway, upstream.url, 2)
        # each with its own token: relayed
        assert _accepted(gateway, mine.handle, station_headers(mine.token))
        assert _accepted(gateway, theirs.handle, station_headers(theirs.token))
        # a live token, but of the other station: refused both ways
        assert not _accepted(gateway, theirs.handle, station_headers(mine.token))
        assert not _accepted(gateway, mine.handle, station_headers(theirs.token))
        # nor does naming the claimant's id help when the token is another's
        both = {**station_headers(mine.token), **station_id_headers(theirs.station_id)}
        assert not _accepted(gateway, theirs.handle, both)
        assert len(upstream.seen.auth) == 2  # the refused ones never went upstream


def test_every_refusal_is_the_same_answer(gateway: Gateway) -> None:
    """Nothing in the gateway's answer tells which check failed: the handle,
    the claim, the token, its station, its revocation or its expiry."""
    with PolicyServer() as upstream:
        run, other, revoked, expired = _held_runs(gateway, upstream.url, 4)
        with gateway.db.session() as s:
            station_credentials.revoke(s, name=revoked.station_name, actor=ADMIN)
            station_credentials.rotate(
                s,
                name=expired.station_name,
                window=timedelta(hours=1),
                actor=ADMIN,
                now=utcnow() - timedelta(hours=2),
            )
            finished = s.scalars(
                sa.select(Assignment).where(Assignment.endpoint_handle == other.handle)
            ).one()
            finished.status = AssignmentStatus.done
        cases = {
            "unknown handle": (new_endpoint_handle(), station_headers(run.token)),
            "malformed handle": ("not-a-handle", station_headers(run.token)),
            "finished claim": (other.handle, station_headers(other.token)),
            "no token": (run.handle, {}),
            "id header only": (run.handle, station_id_headers(run.station_id)),
            "unknown token": (run.handle, station_headers(station_credentials.new_token())),
            "malformed token": (run.handle, {"Authorization": "Bearer x"}),
            "another station's token": (run.handle, station_headers(other.token)),
            "revoked token": (revoked.handle, station_headers(revoked.token)),
            "expired token": (expired.handle, station_headers(expired.token)),
        }
        answers = {label: _refusal(gateway, h, headers) for label, (h, headers) in cases.items()}
        assert answers["unknown handle"][0] == 403
        assert set(answers.values()) == {answers["unknown handle"]}, answers
        assert upstream.seen.auth == []


def test_a_revoked_token_is_refused_on_its_next_connection(gateway: Gateway) -> None:
    with PolicyServer() as upstream:
        (run,) = _held_runs(gateway, upstream.url, 1)
        with _connect(gateway, run.handle, station_headers(run.token)) as open_relay:
            assert open_relay.recv(timeout=10) == METADATA
            with gateway.db.session() as s:
                assert station_credentials.revoke(s, name=run.station_name, actor=ADMIN) == [
                    run.token[: station_credentials.PREFIX_LENGTH]
                ]
            # a relay already open is not cut by the revocation ...
            open_relay.send("reset")
            assert open_relay.recv(timeout=10) == "reset"
        # ... the next connection is refused
        assert not _accepted(gateway, run.handle, station_headers(run.token))
        # re-enrolled, the station has a new token and the old one stays dead
        with gateway.db.session() as s:
            fresh = station_credentials.enrol(
                s, name=run.station_name, profile="sim", actor=ADMIN
            ).token
        assert _accepted(gateway, run.handle, station_headers(fresh))
        assert not _accepted(gateway, run.handle, station_headers(run.token))


def test_a_rotated_token_stays_valid_for_its_window_beside_the_new_one(gateway: Gateway) -> None:
    with PolicyServer() as upstream:
        in_window, past_window = _held_runs(gateway, upstream.url, 2)
        with gateway.db.session() as s:
            # rotated 59 minutes ago with a 1 h window: the old token has a minute left
            new = station_credentials.rotate(
                s,
                name=in_window.station_name,
                window=timedelta(hours=1),
                actor=ADMIN,
                now=utcnow() - timedelta(minutes=59),
            ).token
            # rotated 61 minutes ago with a 1 h window: the old token is over
            newer = station_credentials.rotate(
                s,
                name=past_window.station_name,
                window=timedelta(hours=1),
                actor=ADMIN,
                now=utcnow() - timedelta(minutes=61),
            ).token
        assert _accepted(gateway, in_window.handle, station_headers(in_window.token))
        assert _accepted(gateway, in_window.handle, station_headers(new))
        assert not _accepted(gateway, past_window.handle, station_headers(past_window.token))
        assert _accepted(gateway, past_window.handle, station_headers(newer))
        with gateway.db.session() as s:
            used = {
                t.prefix: t.last_used_at
                for t in station_credentials.tokens_of(s, name=past_window.station_name)
            }
        # the admin sees which token the station host uses now
        assert used[newer[: station_credentials.PREFIX_LENGTH]] is not None
        assert used[past_window.token[: station_credentials.PREFIX_LENGTH]] is None


def test_tokens_are_hashed_at_rest(gateway: Gateway) -> None:
    """After enrolment, rotation, use and revocation, no row of any table
    holds a token in clear; the stored hash is the token's SHA-256."""
    with PolicyServer() as upstream:
        (run,) = _held_runs(gateway, upstream.url, 1)
        assert _accepted(gateway, run.handle, station_headers(run.token))
        with gateway.db.session() as s:
            rotated = station_credentials.rotate(s, name=run.station_name, actor=ADMIN).token
        assert _accepted(gateway, run.handle, station_headers(rotated))
        with gateway.db.session() as s:
            station_credentials.revoke(s, name=run.station_name, actor=ADMIN)
    secrets = [run.token, rotated, run.token[4:], rotated[4:]]
    with gateway.db.session() as s:
        for table in Base.metadata.sorted_tables:
            for row in s.execute(sa.select(table)).all():
                text = repr(tuple(row))
                assert not [x for x in secrets if x in text], table.name
        stored = set(
            s.scalars(
                sa.select(StationToken.token_hash)
                .join_from(
                    StationToken, Assignment, Assignment.station_id == StationToken.station_id
                )
                .where(Assignment.endpoint_handle == run.handle)
            )
        )
    assert stored == {hashlib.sha256(t.encode()).hexdigest() for t in (run.token, rotated)}


def test_enrolment_rotation_and_revocation_rules(committed_db: CommittedDb) -> None:
    with committed_db.session() as s:
        station, first = builders.enrolled_station(s)
        name = station.name
        with pytest.raises(Conflict, match="already enrolled"):
            station_credentials.enrol(s, name=name, profile="sim", actor=ADMIN)
        with pytest.raises(UsageError, match="window"):
            station_credentials.rotate(s, name=name, window=timedelta(days=31), actor=ADMIN)
        with pytest.raises(NotFound, match="no station named"):
            station_credentials.rotate(s, name=f"{name}-x", actor=ADMIN)
        now = utcnow()
        station_credentials.rotate(s, name=name, window=timedelta(hours=2), actor=ADMIN, now=now)
        # a second rotation never lengthens the first token's window
        station_credentials.rotate(s, name=name, window=timedelta(hours=5), actor=ADMIN, now=now)
        listed = station_credentials.tokens_of(s, name=name, now=now)
        assert [t.live for t in listed] == [True, True, True]
        assert listed[-1].prefix == first[: station_credentials.PREFIX_LENGTH]
        assert listed[-1].expires_at == now + timedelta(hours=2)
        assert listed[-2].expires_at == now + timedelta(hours=5)
        with pytest.raises(NotFound, match="prefix"):
            station_credentials.revoke(s, name=name, prefix="pst_nothing", actor=ADMIN)
        station_credentials.revoke(s, name=name, prefix=listed[0].prefix, actor=ADMIN)
        assert station_credentials.live_token(s, first) is not None  # only that one went
        # an empty name, a malformed environment value
        with pytest.raises(UsageError, match="name"):
            station_credentials.enrol(s, name=" ", profile="sim", actor=ADMIN)
    assert station_credentials.token_from_environment({}) is None
    with pytest.raises(UsageError, match="PROCTOR_STATION_TOKEN"):
        station_credentials.token_from_environment({"PROCTOR_STATION_TOKEN": "prt_user-token"})


# -- the development path: a station's id without a token ------------------------------------------
@pytest.fixture(scope="module")
def trusting_gateway(committed_db: CommittedDb) -> Iterator[Gateway]:
    """A gateway set up to trust a station's id header (a development set-up)."""
    app = FastAPI()
    app.include_router(
        gateway_router(
            GatewayConfig(
                session_factory=committed_db.factory,
                encryption_key=None,
                allow_private_endpoints=True,
                trust_station_header=True,
            )
        )
    )
    with ServerThread(app) as server:
        yield Gateway(f"ws://127.0.0.1:{server.port}", "", committed_db)


def test_the_id_header_is_trusted_only_where_the_settings_say_so(
    trusting_gateway: Gateway, gateway: Gateway
) -> None:
    with PolicyServer() as upstream:
        run, other = _held_runs(trusting_gateway, upstream.url, 2)
        assert _accepted(trusting_gateway, run.handle, station_id_headers(run.station_id))
        assert not _accepted(trusting_gateway, run.handle, station_id_headers(other.station_id))
        # a token, when sent, is checked even here: another station's is refused
        both = {**station_headers(other.token), **station_id_headers(run.station_id)}
        assert not _accepted(trusting_gateway, run.handle, both)
        # the default gateway does not trust the id
        assert not _accepted(gateway, run.handle, station_id_headers(run.station_id))
    assert Settings(env="dev").scheduler.trust_station_header is False
    with pytest.raises(ValueError, match="trust_station_header"):
        Settings(env="prod", secret_key="x" * 48, scheduler={"trust_station_header": True})
