"""The post-rollout log: validation that names the field, and the state rules."""

from __future__ import annotations

import pytest

from proctor.core import episode_record
from proctor.core.db.engine import ProctorSession
from proctor.core.domain import EpisodeState, Outcome, Side
from proctor.core.work import Work
from proctor.station import episodes
from tests import factories


def _awaiting(session: ProctorSession, items: int = 8, proposed: Outcome = Outcome.ran_out_of_time):
    station = episodes.ensure_station(session, name="cell-test", profile="sim")
    obj = episodes.ensure_object_type(session, name="spoons")
    work = Work(
        run_code="R-TEST1",
        object_name="spoons",
        items=items,
        per_item_cap_s=30,
        tote_side=Side.left,
        camera_side=Side.right,
        policy_url="ws://127.0.0.1:1/policy/sealed-handle",
        sim_seed=3,
    )
    ep = episodes.create_episode(session, work=work, station=station, object_type=obj)
    episodes.mark_running(session, episode=ep, clock_start_s=10.0)
    episodes.mark_finishing(session, episode=ep, clock_end_s=70.0, proposed=proposed, reason="x")
    episodes.mark_awaiting_log(session, episode=ep)
    session.flush()
    return ep


def test_a_valid_log_closes_the_episode(db_session: ProctorSession) -> None:
    ep = _awaiting(db_session)
    log = episode_record.OperatorLog.parse(
        {"placed": "6", "lost": 1, "dropped": 0, "outcome": "ran_out_of_time", "notes": " ok "}
    )
    episodes.submit_log(db_session, uid=ep.uid, log=log)
    db_session.flush()
    assert ep.state == EpisodeState.closed
    assert (ep.placed, ep.lost, ep.dropped, ep.outcome) == (6, 1, 0, Outcome.ran_out_of_time)
    assert ep.operator_notes == "ok" and ep.logged_at is not None
    assert ep.duration_s == 60.0
    event = ep.events[-1]
    assert event.kind == "operator_log" and event.details["corrected"] is False
    # the station never stores the policy's URL
    assert ep.run_code == "R-TEST1" and "sealed-handle" not in repr(ep.__dict__)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"placed": 5, "lost": 2, "dropped": 2, "outcome": "ran_out_of_time"},
            r"placed \+ lost \+ dropped: 5 \+ 2 \+ 2 = 9 is more than the 8 items",
        ),
        (
            {"placed": 7, "lost": 0, "dropped": 0, "outcome": "success"},
            r"outcome: 'success' means all 8 items were handled",
        ),
        (
            {"placed": -1, "lost": 0, "dropped": 0, "outcome": "safety"},
            r"placed: must be 0 or more",
        ),
        ({"placed": 2.5, "lost": 0, "dropped": 0, "outcome": "safety"}, r"placed: must be a whole"),
        (
            {"placed": "two", "lost": 0, "dropped": 0, "outcome": "safety"},
            r"placed: must be a whole",
        ),
        ({"lost": 0, "dropped": 0, "outcome": "safety"}, r"placed: required"),
        ({"placed": 1, "lost": 0, "dropped": 0, "outcome": "won"}, r"outcome: must be one of"),
        (
            {"placed": 1, "lost": 0, "dropped": True, "outcome": "safety"},
            r"dropped: must be a whole",
        ),
    ],
)
def test_bad_logs_are_rejected_naming_the_field(
    db_session: ProctorSession, body: dict, message: str
) -> None:
    ep = _awaiting(db_session)
    with pytest.raises(episode_record.LogRejected, match=message):
        episodes.submit_log(db_session, uid=ep.uid, log=episode_record.OperatorLog.parse(body))
    assert ep.state == EpisodeState.awaiting_log and ep.placed is None


def test_success_with_losses_is_all_handled(db_session: ProctorSession) -> None:
    ep = _awaiting(db_session, items=4, proposed=Outcome.success)
    log = episode_record.OperatorLog.parse(
        {"placed": 2, "lost": 1, "dropped": 1, "outcome": "success"}
    )
    episodes.submit_log(db_session, uid=ep.uid, log=log)
    assert ep.outcome == Outcome.success


def test_only_an_episode_awaiting_its_log_takes_one(db_session: ProctorSession) -> None:
    ep = _awaiting(db_session)
    log = episode_record.OperatorLog.parse(
        {"placed": 0, "lost": 0, "dropped": 0, "outcome": "system"}
    )
    episodes.submit_log(db_session, uid=ep.uid, log=log)
    assert ep.events[-1].details["corrected"] is True  # proposed ran_out_of_time, logged system
    with pytest.raises(
        episodes.WrongState, match="already closed; corrections go through the review"
    ):
        episodes.submit_log(db_session, uid=ep.uid, log=log)
    running = factories.episode(
        db_session, factories.object_type(db_session), state=EpisodeState.running
    )
    with pytest.raises(episodes.WrongState, match="is running, not awaiting its log"):
        episodes.submit_log(db_session, uid=running.uid, log=log)
    with pytest.raises(episodes.EpisodeNotFound):
        episodes.submit_log(db_session, uid="nope", log=log)


def test_work_is_validated_naming_the_field() -> None:
    base = dict(
        run_code="R-1A2B",
        object_name="spoons",
        items=8,
        per_item_cap_s=30.0,
        tote_side="left",
        camera_side="right",
        policy_url="ws://x/policy/h",
    )
    Work(**base)
    for field, value, message in [
        ("items", 0, "items: must be a positive integer"),
        ("per_item_cap_s", 0.0, "per_item_cap_s: must be positive"),
        ("tote_side", "up", "tote_side: must be 'left' or 'right'"),
        ("run_code", "r 1", "run_code"),
        ("policy_url", "http://secret-host/policy", "policy: the policy URL must start with ws://"),
    ]:
        with pytest.raises(Exception, match=message) as err:
            Work(**{**base, field: value})
        assert "secret-host" not in str(err.value)  # never echoes the URL
    w = Work(**base)
    assert "ws://" not in repr(w) and "policy" not in w.public_view()
    assert w.budget_s == 240.0
