"""The per-call log and the campaign's latency budget: every call's round trip
and server time, when its chunk was meant to start and did, recorded as one
``policy_calls`` event; an episode whose policy answers too slowly past the
tolerance ends charged to the policy (``latency_budget_exceeded``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from proctor.analysis.latency import calls_from_table, latency
from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.models import Episode, EpisodeEvent
from proctor.core.domain import Outcome, Side
from proctor.core.errors import FieldError
from proctor.core.recording import keys
from proctor.core.recording.reader import load_recording
from proctor.core.work import LatencyBudget, Work
from proctor.policywire.client import Reply
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.policywire.wire.spec import ActionSpace
from proctor.station.control.call_log import CallLog, server_ms
from tests.backends import once
from tests.station.conftest import sim_config, sim_runner


class _SlowSession:
    """A demo session that sleeps before every answer: a slow policy server."""

    def __init__(self, inner: Any, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        time.sleep(self.delay_s)
        reply = self.inner.infer(observation)
        # what an openpi server reports of its own time (its ``server_timing``)
        reply["server_timing"] = {"infer_ms": self.delay_s * 1000.0}
        return reply

    def reset(self, message: dict[str, Any]) -> None:
        self.inner.reset(message)


class _SlowPolicy:
    def __init__(self, delay_s: float) -> None:
        self.inner, self.delay_s = DemoPolicy("reference", seed=0), delay_s

    def metadata(self) -> dict[str, Any]:
        return self.inner.metadata()

    def new_session(self) -> _SlowSession:
        return _SlowSession(self.inner.new_session(), self.delay_s)


def _work(url: str, budget: LatencyBudget | None, cap_s: float = 30.0) -> Work:
    return Work(
        run_code="R-LAT01",
        object_name="towels",
        items=2,
        per_item_cap_s=cap_s,
        tote_side=Side.right,
        camera_side=Side.left,
        policy_url=url,
        sim_seed=4,
        latency_budget=budget,
    )


def _calls_event(sessions: Any, uid: str) -> dict[str, Any]:
    with session_scope(sessions) as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        assert ep is not None
        events = s.scalars(
            sa.select(EpisodeEvent).where(
                EpisodeEvent.episode_id == ep.id, EpisodeEvent.kind == keys.POLICY_CALLS_EVENT
            )
        ).all()
        assert len(events) == 1
        return dict(events[0].details)


@once()
def test_a_slow_policy_past_the_budget_ends_charged_to_the_policy(
    station_db, tmp_path: Path, backend: str
) -> None:
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    budget = LatencyBudget(budget_ms=40.0, tolerance=2)
    with PolicyServer(_SlowPolicy(0.12)) as server:
        with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
            uid = runner.arm(_work(server.url, budget))
            runner.start(background=False)
            summary = runner.last
    assert summary is not None and summary.uid == uid
    # a scored failure of the policy's (its operation is a ghost), never the station's
    assert summary.proposed == Outcome.safety
    assert summary.reason.startswith(keys.LATENCY_BUDGET_EXCEEDED + ":"), summary.reason
    assert "3 policy calls took longer than the campaign's 40 ms budget" in summary.reason
    assert summary.policy_calls == 3  # the third call over the budget ended it
    details = _calls_event(sessions, uid)
    cols = details["columns"]
    assert details["budget_ms"] == 40.0 and details["tolerance"] == 2
    assert details["over_budget"] == 3 and cols["over_budget"] == [True, True, True]
    assert all(rtt >= 120.0 for rtt in cols["round_trip_ms"])
    # the server's own time, as its dialect decoded ``server_timing``
    assert cols["server_ms"] == [120.0, 120.0, 120.0]
    with session_scope(sessions) as s:
        rec = load_recording(s, store, uid)
        assert rec.manifest["policy"]["calls_over_budget"] == 3
        rec.close()


@once()
def test_every_call_is_tabled_and_a_fast_policy_is_within_budget(
    station_db, policy_server, tmp_path: Path, backend: str
) -> None:
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    server = policy_server("reference")
    with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
        uid = runner.arm(_work(server.url, LatencyBudget(budget_ms=5000.0)))
        runner.start(background=False)
        summary = runner.last
    assert summary is not None and summary.proposed == Outcome.success, summary.reason
    details = _calls_event(sessions, uid)
    cols = details["columns"]
    assert set(cols) == set(keys.POLICY_CALL_COLUMNS)
    n = summary.policy_calls
    assert n > 3 and all(len(v) == n for v in cols.values())
    assert details["over_budget"] == 0 and details["calls_not_listed"] == 0
    assert cols["server_ms"] == [None] * n  # the demo server reports no timing
    t_ask = np.array(cols["t_ask_s"])
    assert t_ask[0] == pytest.approx(0.0, abs=1e-9) and np.all(np.diff(t_ask) > 0)
    # a virtual clock stands still while the policy thinks: every chunk on time
    np.testing.assert_allclose(cols["t_start_s"], cols["t_intended_s"], atol=1e-9)
    # every row played is counted against its call: as many as the action steps
    # the telemetry recorded, and the chunk's span each but the last
    with session_scope(sessions) as s:
        rec = load_recording(s, store, uid)
        steps = int(np.nanmax(rec.column(keys.ACTION_STEP))) + 1
        rec.close()
    # (the step that handled the last item ends the episode before a sample shows it)
    assert sum(cols["actions"]) - steps in (0, 1)
    assert len(set(cols["actions"][:-1])) == 1 and cols["actions"][0] > 0


@once()
def test_in_real_time_a_late_reply_makes_its_chunks_actions_stale(
    station_db, tmp_path: Path, backend: str
) -> None:
    """A policy that takes 100 ms a reply at 15 Hz (a step is 66.7 ms), chunks
    asked for when the last one runs out: every chunk starts two steps after
    it was needed, so every action is stale, as the analysis counts them."""
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    cfg = sim_config(control_hz=15.0, sim={"clock": "monotonic"})
    with PolicyServer(_SlowPolicy(0.10)) as server:
        with sim_runner(sessions, store, tmp_path, cfg) as runner:
            uid = runner.arm(_work(server.url, None, cap_s=0.75))
            runner.start(background=False)
    details = _calls_event(sessions, uid)
    cols = details["columns"]
    late = np.array(cols["t_start_s"]) - np.array(cols["t_intended_s"])
    played = np.array(cols["actions"])
    assert len(late) >= 3 and played.sum() > 0
    # 100 ms and the wait for the next step: at least two steps (133 ms) late
    assert np.all(late >= 2 / 15 - 1e-6), late
    table = calls_from_table(details)
    assert table is not None
    assert latency([table]).stale_action_rate == 1.0


def _reply(latency_s: float, *, timed: bool = False, timing: Any = None) -> Reply:
    return Reply(
        actions=np.zeros((10, 7)),
        latency_s=latency_s,
        t_request=0.0,
        space=ActionSpace.cartesian_position,
        timed_from_call=timed,
        server_timing=timing,
    )


def test_the_intended_start_of_a_chunk_on_a_hand_built_schedule() -> None:
    """At 10 Hz from t0 = 100 s: a chunk needed at step 100.5 whose reply let
    it start at 100.8 was intended at 100.5; a chunk timed from its call asked
    at 101.0 and starting from row 3 was intended at 101.3."""
    log = CallLog(100.0, 10.0, LatencyBudget(budget_ms=200.0, tolerance=1))
    log.needed(100.5)
    log.needed(100.6)  # still waiting: the first step it was needed at counts
    late = log.replied(_reply(0.15), asked_at=100.4, t=100.8, first_row=0)
    assert (late.t_ask_s, late.t_intended_s, late.t_start_s) == pytest.approx((0.4, 0.5, 0.8))
    assert not late.over_budget and late.skipped == 0
    timed = log.replied(_reply(0.31, timed=True), asked_at=101.0, t=101.3, first_row=3)
    assert timed.t_intended_s == pytest.approx(1.3) and timed.skipped == 3
    assert timed.over_budget and log.over_budget == 1 and not log.exceeded
    log.played()
    log.played()
    assert [c.actions for c in log.calls] == [0, 2]
    log.replied(_reply(0.201), asked_at=102.0, t=102.0, first_row=0)
    assert log.exceeded  # two over a tolerance of one


def test_the_server_time_is_read_from_what_the_server_reported() -> None:
    assert server_ms({"infer_ms": 12.5, "prev_total_ms": 40.0}) == 12.5  # openpi
    assert server_ms({"decode_ms": 1.0, "model_ms": 30.0}) == 30.0  # Positronic, no infer_ms
    assert server_ms({"prev_total_ms": 40.0}) is None
    assert server_ms({"infer_ms": -1.0}) is None and server_ms(None) is None


def test_a_latency_budget_is_validated_naming_the_field() -> None:
    with pytest.raises(FieldError, match=r"latency_budget\.budget_ms"):
        LatencyBudget(budget_ms=0.0)
    with pytest.raises(FieldError, match=r"latency_budget\.tolerance"):
        LatencyBudget(budget_ms=100.0, tolerance=-1)
