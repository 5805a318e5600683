"""Drift sentinels (proctor/analysis/drift.py): the trend and station tests
hold their size on null simulated campaigns (2,000 each, within the
binomial interval) and find a planted trend and a slow station."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from scipy import stats

from proctor.analysis.drift import mann_kendall, sentinel_drift, throughput
from proctor.analysis.episodes import Episode

REPS = 2000
N = 40  # sentinel episodes: one per block, a PhAIL-sized campaign
ALPHA = 0.05
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _episodes(rng: np.random.Generator, slowdown: np.ndarray, stations: list[str]) -> list[Episode]:
    """A reference's episodes: 4 items, exponential item times (mean 8 s ×
    slowdown), 60 s budget, so some run out of time and ties occur."""
    out = []
    for i, (k, st) in enumerate(zip(slowdown, stations, strict=True)):
        times = np.cumsum(rng.exponential(8.0 * k, size=4))
        placed = tuple(float(t) for t in times if t < 60)
        out.append(
            Episode(
                episode_id=f"e{i}",
                policy="ref",
                object="spoons",
                items=4,
                duration_s=placed[-1] if len(placed) == 4 else 60.0,
                placements_s=placed,
                lost=0,
                dropped=0,
                outcome="success" if len(placed) == 4 else "ran_out_of_time",
                budget_s=60.0,
                station=st,
            )
        )
    return out


def _starts(n: int) -> dict[str, datetime]:
    return {f"e{i}": T0 + timedelta(minutes=5 * i) for i in range(n)}


def _rate(flags: list[bool]) -> tuple[float, float, float]:
    k = sum(flags)
    ci = stats.binomtest(k, len(flags)).proportion_ci(0.99)
    return k / len(flags), ci.low, ci.high


def _simulate(
    slowdown: np.ndarray, slow_station: float, seed: int
) -> tuple[list[bool], list[bool]]:
    rng = np.random.default_rng(seed)
    trend, station = [], []
    starts = _starts(N)
    for _ in range(REPS):
        st = list(rng.choice(["cell-a", "cell-b"], size=N))
        k = slowdown * np.where(np.array(st) == "cell-b", slow_station, 1.0)
        (d,) = sentinel_drift(_episodes(rng, k, st), ["ref"], starts, alpha=ALPHA)
        trend.append(bool(d.trend and d.trend.flagged))
        station.append(bool(d.stations and d.stations.flagged))
    return trend, station


def test_both_tests_hold_their_size_on_null_campaigns() -> None:
    trend, station = _simulate(np.ones(N), 1.0, seed=1)
    level = ALPHA / 2  # one sentinel, two tests
    for flags in (trend, station):
        rate, low, _high = _rate(flags)
        # at most the level, within simulation noise (99 % interval)
        assert low <= level, rate
        assert rate > 0  # the test is not dead


def test_a_planted_trend_and_a_slow_station_are_flagged() -> None:
    # the reference's item time triples over the campaign (fatigue, a worn
    # gripper); exponential item times make one episode's throughput noisy, so
    # a trend must be large to be seen in 40 episodes (docs/methods.md §12)
    trend, _ = _simulate(np.linspace(1.0, 3.0, N), 1.0, seed=2)
    assert np.mean(trend) >= 0.8
    # one station twice as slow as the other, no trend
    _, station = _simulate(np.ones(N), 2.0, seed=3)
    assert np.mean(station) >= 0.9


def test_the_flag_names_the_direction_and_the_episodes() -> None:
    rng = np.random.default_rng(5)
    eps = _episodes(rng, np.linspace(1.0, 3.0, N), ["cell-a"] * N)
    (d,) = sentinel_drift(eps, ["ref"], _starts(N), alpha=ALPHA)
    assert d.flagged and d.trend is not None and d.trend.direction == "slower"
    assert d.trend.episodes == tuple(f"e{i}" for i in range(N))
    assert d.stations is None  # one station: nothing to compare
    js = d.to_json()
    assert js["trend"]["flagged"] is True and js["level"] == ALPHA / 2


def test_mann_kendall_matches_its_definition_and_handles_ties() -> None:
    k = mann_kendall([1, 2, 3, 4, 5, 6, 7, 8])
    assert k.s == 28 and k.z > 0 and k.p < 0.01
    k = mann_kendall([2, 2, 2, 2])
    assert (k.s, k.z, k.p) == (0.0, 0.0, 1.0)
    assert throughput(_episodes(np.random.default_rng(0), np.ones(1), ["x"])[0]) > 0


def test_alpha_is_checked() -> None:
    with pytest.raises(ValueError, match="alpha"):
        sentinel_drift([], ["ref"], {}, alpha=0)
