"""Drift sentinels (docs/methods.md §12): is a policy that recurs in every
block — the reference always, and any the campaign marks — getting faster
or slower over the campaign, or running differently on different stations?

Per sentinel episode the statistic is its throughput, items placed per
minute of episode (a ``system`` episode scores nothing and is left out).
Two pre-registered tests, each at α / (2 · sentinels) (Bonferroni over both
tests of every sentinel):

* **trend**: Mann–Kendall on throughput in start order,
  S = Σ_{i<j} sign(x_j − x_i), variance with the tie correction,
  z = (S − sign(S)) / √Var (continuity-corrected), two-sided normal p;
* **stations**: Kruskal–Wallis H over the stations that ran the sentinel
  (each with at least ``MIN_PER_STATION`` episodes), χ²(k − 1) p, tie-corrected.

Both are rank tests: throughput is bounded and skewed (a failed episode
places few items), and ranks make the null distribution free of its shape.
Their null is exchangeability of the sentinel's episodes over time or over
stations, which the block design supports (the sentinel runs once per block,
in a random position); the tests' size under that null, and their power on
a planted trend, are checked by simulation in tests/analysis/test_drift.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from scipy import special  # not scipy.stats at import: see binary.py

from proctor.analysis.episodes import SYSTEM, Episode

MIN_EPISODES = 8  # fewer: no trend test (the normal approximation needs some n)
MIN_PER_STATION = 3


def throughput(e: Episode) -> float:
    """Items placed per minute of the episode (0 for an instant episode)."""
    return 60.0 * e.placed / e.duration_s if e.duration_s > 0 else 0.0


def mann_kendall(x: Sequence[float]) -> tuple[float, float, float]:
    """(S, z, two-sided p) of the Mann–Kendall trend test on ``x`` in order."""
    v = np.asarray(x, dtype=float)
    n = v.size
    diff = np.sign(v[None, :] - v[:, None])
    s = float(np.triu(diff, 1).sum())
    _, counts = np.unique(v, return_counts=True)
    var = (n * (n - 1) * (2 * n + 5) - float(np.sum(counts * (counts - 1) * (2 * counts + 5)))) / 18
    if var <= 0:
        return s, 0.0, 1.0
    z = (s - math.copysign(1.0, s)) / math.sqrt(var) if s != 0 else 0.0
    return s, z, float(2 * special.ndtr(-abs(z)))


@dataclass(frozen=True)
class TrendTest:
    s: float
    z: float
    p: float
    flagged: bool
    direction: str | None  # "slower" / "faster" over time, when flagged
    episodes: tuple[str, ...]  # the sentinel's episodes, in start order


@dataclass(frozen=True)
class StationTest:
    h: float
    p: float
    flagged: bool
    median_by_station: dict[str, float]
    episodes_by_station: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class SentinelDrift:
    policy: str
    level: float  # the per-test level, α / (2 · sentinels)
    trend: TrendTest | None  # None: fewer than MIN_EPISODES scored episodes
    stations: StationTest | None  # None: fewer than two stations with enough episodes

    @property
    def flagged(self) -> bool:
        trend = self.trend is not None and self.trend.flagged
        return trend or (self.stations is not None and self.stations.flagged)

    def to_json(self) -> dict[str, object]:
        t, st = self.trend, self.stations
        return {
            "policy": self.policy,
            "level": self.level,
            "flagged": self.flagged,
            "trend": None
            if t is None
            else {
                "mann_kendall_s": t.s,
                "z": t.z,
                "p": t.p,
                "flagged": t.flagged,
                "direction": t.direction,
                "episodes": list(t.episodes),
            },
            "stations": None
            if st is None
            else {
                "kruskal_wallis_h": st.h,
                "p": st.p,
                "flagged": st.flagged,
                "median_throughput": st.median_by_station,
                "episodes": {k: list(v) for k, v in st.episodes_by_station.items()},
            },
        }


def trend_test(ordered: Sequence[Episode], level: float) -> TrendTest | None:
    if len(ordered) < MIN_EPISODES:
        return None
    s, z, p = mann_kendall([throughput(e) for e in ordered])
    flagged = p < level
    return TrendTest(
        s=s,
        z=z,
        p=p,
        flagged=flagged,
        direction=("faster" if s > 0 else "slower") if flagged else None,
        episodes=tuple(e.episode_id for e in ordered),
    )


def station_test(episodes: Sequence[Episode], level: float) -> StationTest | None:
    groups: dict[str, list[Episode]] = {}
    for e in episodes:
        if e.station:
            groups.setdefault(e.station, []).append(e)
    groups = {k: v for k, v in sorted(groups.items()) if len(v) >= MIN_PER_STATION}
    if len(groups) < 2:
        return None
    samples = [[throughput(e) for e in v] for v in groups.values()]
    if len({x for sample in samples for x in sample}) < 2:
        h, p = 0.0, 1.0  # every value equal: no evidence of anything
    else:
        # imported here: scipy.stats costs every `proctor analyze` half a second
        # of start-up, and only a campaign with several stations gets this far
        from scipy import stats

        h, p = (float(r) for r in stats.kruskal(*samples))
    return StationTest(
        h=h,
        p=p,
        flagged=p < level,
        median_by_station={k: float(np.median(s)) for k, s in zip(groups, samples, strict=True)},
        episodes_by_station={k: tuple(e.episode_id for e in v) for k, v in groups.items()},
    )


def sentinel_drift(
    episodes: Sequence[Episode],
    sentinels: Sequence[str],
    starts: dict[str, datetime],
    *,
    alpha: float,
) -> list[SentinelDrift]:
    """Both tests for every sentinel (by policy name) with episodes;
    ``starts`` orders them (:func:`proctor.analysis.sequential.start_times`)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be in (0, 1), got {alpha}")
    level = alpha / (2 * max(len(sentinels), 1))
    out: list[SentinelDrift] = []
    for name in sentinels:
        mine = [e for e in episodes if e.policy == name and e.outcome != SYSTEM]
        if not mine:
            continue
        mine.sort(key=lambda e: starts[e.episode_id])
        out.append(
            SentinelDrift(
                policy=name,
                level=level,
                trend=trend_test(mine, level),
                stations=station_test(mine, level),
            )
        )
    return out
