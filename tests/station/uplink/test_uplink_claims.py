"""Claiming runs over the station API (against the fake server,
tests/station/uplink/fake_station_server.py): a lost reply is asked again under the
same key and gets the same run; offline, no claim is made; the claimed work
carries no server row and reaches the policy through the server's gateway."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from proctor.core.db import session_scope
from proctor.core.domain import Outcome
from proctor.core.errors import FieldError
from proctor.core.station_api_wire import EpisodeWire
from proctor.station import episodes
from proctor.station.uplink.client import Offline, StationApiClient
from proctor.station.uplink.remote_work_source import RemoteWorkSource, to_work
from tests.station.uplink.fake_station_server import FakeStationServer
from tests.station.uplink.uplink_support import (
    TOKEN,
    Link,
    hello_template,
    until,
    work_wire,
)
from tests.station.uplink.uplink_support import fake as fake  # the fixture
from tests.station.uplink.uplink_support import link as link  # the fixture


def _source(up: Link, campaign: str = "spring") -> RemoteWorkSource:
    return RemoteWorkSource(
        client=up.client,
        outbox=up.outbox,
        forwarder=up.forwarder,
        sessions=up.ledger.sessions,
        campaign=campaign,
    )


def test_a_claim_whose_reply_was_lost_is_asked_again_and_gets_the_same_run(
    fake: FakeStationServer, link: Callable[..., Link]
) -> None:
    fake.state.runs = [
        work_wire("R-1", object_display_name="Bath towels", object_prompt="put the towels away"),
        work_wire("R-2"),
    ]
    up = link()
    source = _source(up)
    until(lambda: up.forwarder.online, what="online")
    fake.state.drop_after.add("claims")  # acts, then the connection is cut
    assert source.claim() is None
    assert "offline" in source.nothing_reason
    assert fake.state.claims == ["R-1"]  # the server did act on it
    until(lambda: up.forwarder.online, what="back online")

    work = source.claim()
    assert work is not None and work.run_code == "R-1"
    keys = [c[2] for c in fake.calls_to("/claims")]
    assert keys == ["claim:spring:0", "claim:spring:0"]  # the same key, answered once
    assert fake.state.acted_keys.count("claim:spring:0") == 1
    assert fake.state.violations == []
    # the ledger holds no server row; the object type as the campaign names it
    assert work.campaign_id is None and work.assignment_id is None
    assert work.prompt == "put the towels away"
    with session_scope(up.ledger.sessions) as s:
        obj = episodes.ensure_object_type(s, name="towels")
        assert obj.display_name == "Bath towels"

    # the next claim is a new one (the fake still holds R-1: the held run again)
    source.completed(work, episode_uid="x" * 16, outcome=Outcome.success)
    assert source.claim() is not None
    assert [c[2] for c in fake.calls_to("/claims")][-1] == "claim:spring:1"


def test_offline_no_claim_is_made_and_the_reason_is_given(
    fake: FakeStationServer, link: Callable[..., Link]
) -> None:
    fake.state.runs = [work_wire("R-3")]
    up = link()
    source = _source(up)
    until(lambda: up.forwarder.online, what="online")
    fake.stop()
    until(lambda: not up.forwarder.online, what="offline")
    sent: list[str] = []  # every request the station's client puts on the wire
    up.client.http.event_hooks["request"].append(lambda r: sent.append(r.url.path))
    assert source.claim() is None
    assert source.nothing_reason.startswith("the server is offline")
    assert not [p for p in sent if p.endswith("/claims")]  # no claim was attempted
    assert up.outbox.counter("claim:spring") == 0  # and no key was spent
    fake.start()
    until(lambda: up.forwarder.online, what="online again")
    claimed = source.claim()
    assert claimed is not None and claimed.run_code == "R-3"


def test_an_empty_campaign_says_so(fake: FakeStationServer, link: Callable[..., Link]) -> None:
    up = link()
    until(lambda: up.forwarder.online, what="online")
    source = _source(up)
    assert source.claim() is None
    assert source.nothing_reason == "the campaign has no run left"


def test_a_claim_refused_while_an_episode_is_live_gets_no_work_and_says_why(
    fake: FakeStationServer, link: Callable[..., Link]
) -> None:
    fake.state.runs = [work_wire("R-5")]
    fake.state.refuse_claims = "campaign: run R-4, which this station holds, has episode x running"
    up = link()
    source = _source(up)
    until(lambda: up.forwarder.online, what="online")
    assert source.claim() is None
    assert source.nothing_reason == (
        "the server refused the claim: campaign: run R-4, which this station holds, "
        "has episode x running"
    )
    assert fake.state.claims == [] and up.forwarder.online  # refused, not offline
    # once the episode is settled the station claims again, under a fresh key
    fake.state.refuse_claims = None
    work = source.claim()
    assert work is not None and work.run_code == "R-5"
    assert [c[2] for c in fake.calls_to("/claims")] == ["claim:spring:0", "claim:spring:1"]


def test_claimed_work_dials_the_gateway_with_the_station_token() -> None:
    secure = StationApiClient("https://proctor.example.org", TOKEN)
    plain = StationApiClient("http://127.0.0.1:8000/", TOKEN)
    try:
        work = to_work(work_wire("R-4", dialect="roboarena"), secure)
        assert work.policy_url == "wss://proctor.example.org/policy/h-opaque"
        assert work.policy_headers == {"Authorization": f"Bearer {TOKEN}"}
        assert work.dialect is not None and work.dialect.value == "roboarena"
        assert to_work(work_wire("R-5"), plain).policy_url == "ws://127.0.0.1:8000/policy/h-opaque"
        teleop = work_wire("R-6", gateway_path=None, teleop_url="ws://127.0.0.1:8765")
        assert to_work(teleop, plain).policy_url == "ws://127.0.0.1:8765"
        with pytest.raises(FieldError) as exc:
            to_work(work_wire("R-7", gateway_path=None), plain)
        assert exc.value.field == "work.gateway_path"
    finally:
        secure.close()
        plain.close()


def test_a_dead_server_is_offline_and_a_refusal_names_its_field(
    fake: FakeStationServer,
) -> None:
    client = StationApiClient(fake.url, TOKEN, timeout_s=5)
    try:
        with pytest.raises(FieldError) as exc:
            client.claim("spring", key="bad key with spaces")
        assert exc.value.field == "idempotency_key"
        fake.state.refuse_uids.add("u" * 16)
        episode = EpisodeWire(
            uid="u" * 16,
            rev=1,
            run_code="R-8",
            object="towels",
            items=2,
            budget_s=60,
            tote_side="left",
            camera_side="right",
            state="armed",
        )
        with pytest.raises(FieldError) as refused:
            client.put_episode(episode)
        assert refused.value.field == "object"
        assert "no such object type" in str(refused.value)
        client.hello(hello_template())
        assert client.clock_offset_s is not None
        fake.stop()
        with pytest.raises(Offline):
            client.hello(hello_template())
    finally:
        client.close()
