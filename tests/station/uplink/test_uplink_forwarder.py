"""Store and forward against the fake station-API server (a stand-in for the
real routes: tests/station/uplink/fake_station_server.py): order, exactly-once
delivery across a server outage, artifacts before the final snapshot,
abandon reports, and a refused token."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from proctor.core.db import session_scope
from proctor.station import episodes
from proctor.station.uplink.client import Offline
from tests.station.uplink.fake_station_server import FakeStationServer
from tests.station.uplink.uplink_support import (
    TOKEN,
    Link,
    close_episode,
    until,
    write_episode,
)
from tests.station.uplink.uplink_support import fake as fake  # the fixture
from tests.station.uplink.uplink_support import link as link  # the fixture


def _order(server: FakeStationServer) -> list[str]:
    """Episode uids in the order the fake first stored them."""
    seen: list[str] = []
    for uid, _ in server.state.stored_revs:
        if uid not in seen:
            seen.append(uid)
    return seen


def _revs_ascend(server: FakeStationServer) -> bool:
    per: dict[str, list[int]] = {}
    for uid, rev in server.state.stored_revs:
        per.setdefault(uid, []).append(rev)
    return all(revs == sorted(set(revs)) for revs in per.values())


def test_episodes_reach_the_server_in_ledger_order_with_their_artifacts(
    fake: FakeStationServer, link: Callable[..., Link]
) -> None:
    up = link(start=False)
    blob = os.urandom(150_000)  # three parts of the fake's 64 KiB
    uids = [
        write_episode(up.ledger, "R-A1", artifact=blob),
        write_episode(up.ledger, "R-A2"),
        write_episode(up.ledger, "R-A3", close=False),
    ]
    up.forwarder.start()
    assert up.forwarder.drain(30), up.forwarder.status()
    assert _order(fake) == uids
    assert fake.state.violations == []
    assert [fake.state.episodes[u].state for u in uids] == ["closed", "closed", "awaiting_log"]
    ((uid, sha),) = fake.state.artifacts
    assert uid == uids[0] and fake.state.artifacts[(uid, sha)].size_bytes == len(blob)
    # the final snapshot of the first episode came after its artifact was registered
    puts = [c for c in fake.state.calls if c[1].endswith(uids[0]) or c[1].endswith("/complete")]
    assert puts[-1][1].endswith(uids[0]) and puts[-2][1].endswith("/complete")
    status = up.forwarder.status()
    assert status["online"] is True and status["waiting"] == 0 and status["last_error"] is None
    assert status["clock_offset_s"] is not None and abs(status["clock_offset_s"]) < 5


def test_an_outage_loses_nothing_and_delivers_everything_once_in_order(
    fake: FakeStationServer, link: Callable[..., Link]
) -> None:
    up = link()
    first = write_episode(up.ledger, "R-B1")
    assert up.forwarder.drain(30)
    fake.stop()
    until(lambda: up.forwarder.status()["online"] is False, what="offline")
    second = write_episode(up.ledger, "R-B2", artifact=os.urandom(70_000), close=False)
    third = write_episode(up.ledger, "R-B3")
    close_episode(up.ledger, second, operator_label="cell-a:olga")  # written offline
    up.forwarder.nudge()
    status = until(
        lambda: (s := up.forwarder.status())["waiting"] == 2 and s,  # type: ignore[truthy-bool]
        what="two episodes waiting",
    )
    assert status["online"] is False and status["last_error"]

    fake.start()  # the same port
    assert up.forwarder.drain(60), up.forwarder.status()
    assert _order(fake) == [first, second, third]
    assert fake.state.violations == []
    assert _revs_ascend(fake)
    assert len(fake.state.acted_keys) == len(set(fake.state.acted_keys))
    logged = fake.state.episodes[second]
    assert logged.state == "closed" and logged.placed == 2
    assert (logged.operator_label, logged.operator_id) == ("cell-a:olga", None)
    assert logged.events[-1].kind == "operator_log"
    assert len(fake.state.artifacts) == 1
    assert up.forwarder.status() | {"clock_offset_s": None} == {
        "online": True,
        "waiting": 0,
        "uploading": None,
        "last_error": None,
        "refused": 0,
        "clock_offset_s": None,
    }


def test_a_server_failing_mid_pass_holds_the_pass_where_it_is(
    fake: FakeStationServer, link: Callable[..., Link]
) -> None:
    up = link(start=False)
    uids = [write_episode(up.ledger, f"R-F{n}") for n in range(3)]
    fake.state.unavailable.add(uids[0])  # its PUT fails once, nothing stored
    up.forwarder.start()
    assert up.forwarder.drain(60), up.forwarder.status()
    assert _order(fake) == uids  # the later ones did not overtake it
    assert up.forwarder.status()["refused"] == 0
    assert len(fake.calls_to(uids[0], "PUT")) == 2


def test_a_restarted_station_does_not_send_again_what_the_server_confirmed(
    fake: FakeStationServer, link: Callable[..., Link]
) -> None:
    up = link()
    write_episode(up.ledger, "R-C1", artifact=b"x" * 1000)
    assert up.forwarder.drain(30)
    stored = list(fake.state.stored_revs)
    up.forwarder.close()
    up.outbox.close()
    again = link()  # the same ledger and outbox files
    assert again.forwarder.drain(30)
    assert fake.state.stored_revs == stored
    assert fake.calls_to("/uploads", "POST") and len(fake.calls_to("/uploads", "POST")) == 1


def test_an_upload_the_server_aborted_meanwhile_is_begun_afresh(
    fake: FakeStationServer, link: Callable[..., Link]
) -> None:
    """The link drops mid-upload; when it is back the server has aborted the
    upload (its sweep: left open too long). The plan call is refused (409)
    and the station begins a new upload, not refusing the artifact."""
    up = link(start=False)
    blob = os.urandom(150_000)
    uid = write_episode(up.ledger, "R-S1", artifact=blob)
    fake.state.unavailable.add("/parts/2")
    with pytest.raises(Offline):
        up.forwarder.run_once()
    assert list(fake.state.uploads) == ["up-1"]
    fake.state.aborted.add("up-1")
    up.forwarder.run_once()
    assert list(fake.state.uploads) == ["up-1", "up-2"]
    ((got_uid, _sha),) = fake.state.artifacts
    assert got_uid == uid and up.forwarder.waiting() == 0
    assert fake.calls_to("/uploads/up-1", "GET")


@pytest.mark.parametrize("when", ["2", "complete"], ids=["mid-parts", "at-completion"])
def test_an_upload_aborted_while_it_is_sent_is_begun_afresh_next_pass(
    fake: FakeStationServer, link: Callable[..., Link], when: str
) -> None:
    """The server's sweep aborts the upload while the station is sending it:
    a part or the completion is answered 409. The artifact is not refused for
    good (it would never reach the server, and the console would stop
    counting it): the next pass begins a new upload and registers it."""
    up = link(start=False)
    blob = os.urandom(150_000)
    uid = write_episode(up.ledger, "R-S1", artifact=blob)
    fake.state.abort_at.add(f"up-1/{when}")
    up.forwarder.run_once()
    assert list(fake.state.uploads) == ["up-1"] and not fake.state.artifacts
    assert up.forwarder.waiting() == 1  # still counted as waiting, not given up
    up.forwarder.run_once()
    assert list(fake.state.uploads) == ["up-1", "up-2"]
    ((got_uid, _sha),) = fake.state.artifacts
    assert got_uid == uid and up.forwarder.waiting() == 0
    assert not fake.state.violations


def test_a_lost_outbox_numbers_the_next_snapshot_past_what_the_server_holds(
    fake: FakeStationServer, link: Callable[..., Link], tmp_path
) -> None:
    up = link()
    uid = write_episode(up.ledger, "R-G1", close=False)
    assert up.forwarder.drain(30)
    with session_scope(up.ledger.sessions) as s:  # a second revision on the server
        episodes.add_event(s, episode=episodes.get_episode(s, uid), kind="note", message="n")
    assert up.forwarder.drain(30)
    assert fake.state.episodes[uid].rev == 2
    up.forwarder.close()
    up.outbox.close()
    (tmp_path / "station" / "uplink.db").unlink()  # the outbox is gone, the ledger is not
    again = link()
    assert again.forwarder.drain(30)
    close_episode(again.ledger, uid)
    assert again.forwarder.drain(30)
    assert fake.state.episodes[uid].state == "closed"  # not taken for a replay
    assert fake.state.violations == [] and _revs_ascend(fake)


def test_an_abandon_queued_offline_is_sent_once_when_the_server_is_back(
    fake: FakeStationServer, link: Callable[..., Link]
) -> None:
    from tests.station.uplink.uplink_support import work_wire

    fake.state.held = work_wire("R-D1")
    up = link()
    assert up.forwarder.drain(30)
    fake.stop()
    until(lambda: not up.forwarder.online, what="offline")
    up.outbox.queue_abandon("R-D1", "the policy did not answer its pre-flight")
    up.forwarder.nudge()
    assert up.forwarder.drain(2) is False  # it waits
    fake.state.drop_after.add("abandon")  # the first reply is lost on the way back
    fake.start()
    assert up.forwarder.drain(60)
    assert fake.state.abandons == [("R-D1", "the policy did not answer its pre-flight")]
    assert up.outbox.pending_abandons() == []
    sent = fake.calls_to("/abandon")
    assert len(sent) == 2 and sent[0][2] == sent[1][2]  # asked again under the same key
    assert up.forwarder.status()["refused"] == 0 and fake.state.violations == []


def test_a_refused_episode_is_reported_and_the_next_one_still_goes(
    fake: FakeStationServer, link: Callable[..., Link]
) -> None:
    up = link(start=False)
    bad = write_episode(up.ledger, "R-E1", close=False)
    good = write_episode(up.ledger, "R-E2")
    fake.state.refuse_uids.add(bad)
    up.forwarder.start()
    assert up.forwarder.drain(30), up.forwarder.status()  # nothing waits: the refusal is shown
    assert good in fake.state.episodes and bad not in fake.state.episodes
    status = up.forwarder.status()
    assert status["refused"] == 1
    assert bad in status["last_error"] and "no such object type" in status["last_error"]
    tries = len(fake.calls_to(bad))
    up.forwarder.run_once()
    assert len(fake.calls_to(bad)) == tries == 1  # not retried until it changes

    fake.state.refuse_uids.clear()
    close_episode(up.ledger, bad)  # it changes: tried again, with the next revision
    assert up.forwarder.drain(30)
    assert fake.state.episodes[bad].state == "closed"
    assert up.forwarder.status()["refused"] == 0


def test_a_refused_token_stops_the_forwarder(
    fake: FakeStationServer, link: Callable[..., Link]
) -> None:
    up = link(token="pst_" + "x" * 43)
    until(lambda: up.forwarder.stopped, what="stopped")
    status = up.forwarder.status()
    assert status["online"] is False
    assert status["last_error"].startswith("token refused")
    calls = len(fake.state.calls)
    up.forwarder.nudge()
    assert up.forwarder.drain(1) is False
    assert len(fake.state.calls) == calls  # no retry with a refused token
    assert TOKEN not in str(status)


def test_a_watcher_hears_when_the_link_changes(
    fake: FakeStationServer, link: Callable[..., Link]
) -> None:
    up = link(start=False)
    heard: list[tuple[bool, int]] = []
    up.forwarder.watch(lambda: heard.append((up.forwarder.online, up.forwarder.waiting())))
    up.forwarder.start()
    until(lambda: heard and heard[-1] == (True, 0), what="online")
    fake.stop()
    until(lambda: heard[-1] == (False, 0), what="offline")
    write_episode(up.ledger, "R-W1")
    up.forwarder.nudge()
    until(lambda: heard[-1] == (False, 1), what="one waiting")
    assert len(heard) == len(set(heard))  # told of changes only, not of every pass


def test_a_hello_names_live_only_the_episodes_this_daemon_is_running(
    fake: FakeStationServer, link: Callable[..., Link], tmp_path
) -> None:
    from tests.station.uplink.uplink_support import Ledger

    # a killed predecessor's episode, left awaiting a log nobody can write now
    orphan = write_episode(Ledger.open(tmp_path / "station"), "R-OLD1", close=False)
    up = link(start=False)
    running = write_episode(up.ledger, "R-NEW1", close=False)
    write_episode(up.ledger, "R-NEW0")  # closed: nothing to keep live
    up.forwarder.run_once()
    assert fake.state.hellos[-1].live == [running]  # never the orphan: it goes quiet
    close_episode(up.ledger, running)
    up.forwarder.run_once()
    assert fake.state.hellos[-1].live == []
    assert orphan not in {u for h in fake.state.hellos for u in h.live}
