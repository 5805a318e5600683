"""Latency as a result: round-trip quantiles, the server's share, the
stale-action rate and calls per episode, on hand-derived numbers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from proctor.analysis import store
from proctor.analysis.episodes import Episode, EpisodeTable, validate_episode
from proctor.analysis.latency import (
    TABLE_COLUMNS,
    EpisodeCalls,
    calls_from_table,
    latency,
    quantiles_ms,
    stale_actions,
)
from proctor.analysis.leaderboard import analyze
from proctor.analysis.report import data_version, to_json
from proctor.analysis.results import AnalysisProtocol
from proctor.analysis.synthetic import PHAIL_OBJECTS, cohort, phail_like_models
from proctor.core.recording import keys


def _calls(rtt: list[float], **kw: object) -> EpisodeCalls:
    n = len(rtt)
    base: dict[str, object] = {
        "round_trip_ms": tuple(rtt),
        "server_ms": (None,) * n,
        "t_intended_s": tuple(0.4 * i for i in range(n)),
        "t_start_s": tuple(0.4 * i for i in range(n)),
        "actions": (4,) * n,
        "period_s": 0.1,
    }
    base.update(kw)
    return EpisodeCalls(**base)  # type: ignore[arg-type]


def _cohort(policies: int, per_cell: int) -> list[Episode]:
    objects = dict(list(PHAIL_OBJECTS.items())[:2])
    return list(
        cohort(
            phail_like_models()[:policies],
            objects,
            episodes_per_cell=per_cell,
            rng=np.random.default_rng(5),
        )
    )


def test_quantiles_are_numpys_linear_interpolation() -> None:
    # n = 5: the q-quantile sits at position 4q between order statistics
    # p50 → 30; p95 → 40 + 0.8·10 = 48; p99 → 40 + 0.96·10 = 49.6
    values = np.array([50.0, 10.0, 40.0, 20.0, 30.0])
    assert quantiles_ms(values, (0.5, 0.95, 0.99)) == pytest.approx((30.0, 48.0, 49.6))
    assert quantiles_ms(np.array([]), (0.5, 0.95)) == (None, None)


def test_stale_actions_on_a_hand_built_schedule() -> None:
    """At 10 Hz (a step is 0.1 s), four chunks of 4 rows: on time; on time;
    started 0.2 s late (its reply came two steps late: all 4 rows stale);
    started 0.05 s after its row's time (the row in force on the grid: on time)."""
    intended = np.array([0.0, 0.4, 0.8, 1.2])
    started = np.array([0.0, 0.4, 1.0, 1.25])
    played = np.array([4, 4, 4, 4])
    assert stale_actions(intended, started, played, 0.1) == 4
    # exactly one step late is stale
    assert stale_actions(np.array([0.8]), np.array([0.9]), np.array([3]), 0.1) == 3


def test_a_policys_latency_pools_its_episodes_calls() -> None:
    one = _calls(
        [10.0, 20.0, 30.0],
        server_ms=(8.0, None, 12.0),
        t_start_s=(0.0, 0.6, 0.8),  # the second chunk 0.2 s late: its 4 rows stale
        over_budget=1,
    )
    two = _calls([40.0, 50.0], server_ms=(20.0, None), actions=(4, 2))
    result = latency([one, None, two])  # an episode without a table is left out
    assert (result.p50_ms, result.p95_ms, result.p99_ms) == pytest.approx((30.0, 48.0, 49.6))
    assert result.server_p50_ms == pytest.approx(12.0) and result.server_calls == 3
    assert result.actions == 18 and result.stale_actions == 4
    assert result.stale_action_rate == pytest.approx(4 / 18)
    assert result.calls == 5 and result.episodes == 2
    assert result.calls_per_episode == pytest.approx(2.5)
    assert result.over_budget == 1


def test_no_recorded_call_is_unknown_not_zero() -> None:
    result = latency([None, None])
    assert result.calls == 0 and result.episodes == 0
    assert result.p50_ms is None and result.server_p50_ms is None
    assert result.stale_action_rate is None and result.calls_per_episode is None


def test_the_stations_event_reads_back_as_a_table() -> None:
    details = {
        "control_hz": 15.0,
        "over_budget": 2,
        "calls_not_listed": 0,
        "columns": {
            "t_ask_s": [0.0, 0.5],
            "round_trip_ms": [12.5, 30.0],
            "server_ms": [None, 10.0],
            "t_intended_s": [0.0, 0.5],
            "t_start_s": [0.0, 0.6],
            "actions": [8, 8],
            "skipped": [0, 0],
            "over_budget": [False, True],
        },
    }
    calls = calls_from_table(details)
    assert calls is not None
    assert calls.round_trip_ms == (12.5, 30.0) and calls.server_ms == (None, 10.0)
    assert calls.period_s == pytest.approx(1 / 15) and calls.over_budget == 2
    assert calls_from_table({**details, "calls_not_listed": 3}) is None  # partial
    assert calls_from_table({**details, "columns": {"round_trip_ms": [1.0]}}) is None
    assert calls_from_table({**details, "control_hz": 0}) is None


def test_the_table_and_its_event_are_named_as_the_station_writes_them() -> None:
    assert set(TABLE_COLUMNS) <= set(keys.POLICY_CALL_COLUMNS)
    assert store.POLICY_CALLS_EVENT == keys.POLICY_CALLS_EVENT


def test_a_malformed_table_is_a_problem_naming_its_column() -> None:
    ep = _cohort(1, 1)[0]
    bad = replace(ep, calls=_calls([10.0, -1.0], actions=(4,)))
    fields = {p.field for p in validate_episode(bad)}
    assert {"calls", "calls.round_trip_ms"} <= fields


def test_the_leaderboard_json_carries_latency_for_every_policy() -> None:
    eps = _cohort(2, 4)
    timed = [replace(e, calls=_calls([10.0 + i, 20.0])) for i, e in enumerate(eps)]
    js = to_json(
        analyze(EpisodeTable(tuple(timed)), AnalysisProtocol(tau=240.0, bootstrap=20, seed=1))
    )
    for p in js["policies"]:
        lat = p["latency"]
        assert set(lat) >= {"p50_ms", "p95_ms", "p99_ms", "server_p50_ms", "stale_action_rate"}
        assert lat["calls"] == 2 * p["episodes"] and lat["calls_per_episode"] == 2.0
        assert lat["stale_action_rate"] == 0.0 and lat["server_p50_ms"] is None
        assert lat["p99_ms"] >= lat["p95_ms"] >= lat["p50_ms"] > 10.0


def test_the_data_version_is_the_interchange_files_and_ignores_the_call_table() -> None:
    """An export re-analysed from its file (which has no per-call table) has
    the snapshot's data version."""
    eps = _cohort(1, 2)
    timed = EpisodeTable(tuple(replace(e, calls=_calls([10.0])) for e in eps))
    assert data_version(timed) == data_version(EpisodeTable(tuple(eps)))
